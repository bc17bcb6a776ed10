"""tf.IndexedSlices from an embedding lookup, through the recorder, equal the dense gradient."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.record import Recorder
from tb_gradscope.scopes import leaf_scope
from tests.support.record_fixtures import (
    assert_table_close,
    np_grad_table,
    np_update_table,
    only,
    read_records,
)


# 24 x 2731 > reductions.BIG weights: a big dense gradient beside the sparse one
# (their nonzero counts came in two dtypes, and the step failed to trace).
@pytest.mark.parametrize("units", [1, 2731], ids=["small", "beside_a_big_dense"])
def test_embedding_gradients_are_recorded_exactly(tmp_path, units):
    keras.utils.set_random_seed(2)
    inputs = keras.Input((6,), dtype="int32")
    embedded = keras.layers.Embedding(20, 4, name="emb")(inputs)
    outputs = keras.layers.Dense(units, name="out")(keras.layers.Flatten()(embedded))
    model = keras.Model(inputs, outputs, name="lm")
    variables = model.trainable_variables
    opt = keras.optimizers.SGD(0.1)
    opt.build(variables)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[model])
    ids = tf.constant([[1, 2, 2, 5, 1, 1], [7, 2, 0, 0, 3, 1]])  # repeated ids: duplicate indices

    @tf.function
    def step():
        with rec.tape() as tape:
            loss = tf.reduce_mean(model(ids) ** 2)
        grads_and_vars = rec.gradients(tape, {"mse": loss}, variables)
        rec.apply(opt, grads_and_vars)
        return [g for g, _ in grads_and_vars]

    before = [v.numpy() for v in variables]
    grads = step()
    after = [v.numpy() for v in variables]
    rec.close()
    assert isinstance(grads[0], tf.IndexedSlices) and len(set(grads[0].indices.numpy())) < len(
        grads[0].indices
    )
    dense = [tf.convert_to_tensor(g).numpy() for g in grads]
    leaves = [leaf_scope(f"lm/{v.path}") for v in variables]
    records = only(read_records(str(tmp_path)))
    table = records[(fmt.Kind.GRAD_STATS, "mse")][0]
    assert_table_close(table, np_grad_table(table.info.scopes, leaves, dense), "sparse grads")
    assert 0 < table.row("lm/emb")["zero_frac"] < 1  # untouched rows are exact zeros
    update = records[(fmt.Kind.UPDATE_STATS, "")][0]
    assert_table_close(
        update, np_update_table(update.info.scopes, leaves, before, after), "sparse update"
    )
    np.testing.assert_array_equal(after[0][[4, 6]], before[0][[4, 6]])
