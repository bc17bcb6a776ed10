"""Loss shapes Keras compiles: list losses and weights, one output, BatchNorm statistics."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.integrations.keras import GradscopeCallback
from tests.support.keras_support import record_infos
from tests.support.tf1_support import read_records

pytestmark = pytest.mark.slow


def _data(outputs: int):
    rs = np.random.RandomState(1)
    x = rs.randn(32, 3).astype("float32")
    ys = [rs.randn(32, 1).astype("float32") for _ in range(outputs)]
    return x, ys


def test_list_losses_are_named_by_output_and_weighted(tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((3,))
    q = keras.layers.Dense(1, name="q")(keras.layers.Dense(4, name="shared")(inputs))
    aux = keras.layers.Dense(1, name="aux")(inputs)
    model = keras.Model(inputs, [q, aux], name="net")
    model.compile("sgd", loss=["mse", "mae"], loss_weights=[0.5, 3.0])
    x, ys = _data(2)
    weights_before = [w.numpy() for w in model.weights]
    callback = GradscopeCallback(str(tmp_path), every_n_batches=100)
    model.fit(x, ys, batch_size=32, epochs=1, verbose=0, callbacks=[callback])
    infos = record_infos(str(tmp_path))
    assert {name for kind, name in infos if kind == "grad_stats"} == {"q", "aux"}
    assert infos[("grad_stats", "q")].attrs["loss_weight"] == 0.5
    assert infos[("grad_stats", "aux")].attrs["loss_weight"] == 3.0
    [aux_table] = [r.value for r in read_records(str(tmp_path))[("grad_stats", "aux")]]
    model.set_weights(weights_before)
    with tf.GradientTape() as tape:
        value = 3.0 * tf.reduce_mean(tf.abs(ys[1] - model(x)[1]))
    grads = tape.gradient(value, model.get_layer("aux").trainable_weights)
    expected = np.sqrt(sum(np.sum(np.square(g.numpy(), dtype=np.float64)) for g in grads))
    assert aux_table.row("net/aux")["l2"] == pytest.approx(expected, rel=1e-5)
    assert aux_table.row("net/shared")["grad_vars"] == 0


def test_batchnorm_statistics_move_without_a_gradient(tmp_path):
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(4, name="d"),
            keras.layers.BatchNormalization(name="bn"),
            keras.layers.Dense(1, name="out"),
        ],
        name="seq",
    )
    model.compile("adam", loss="mse")
    x, (y,) = _data(1)
    callback = GradscopeCallback(str(tmp_path), every_n_batches=1)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[callback])
    records = read_records(str(tmp_path))
    [(kind, loss)] = [key for key in records if key[0] == "grad_stats"]
    for rec in records[(kind, loss)]:
        assert rec.value.row("seq/bn")["grad_vars"] == 2  # gamma, beta; not the moving statistics
    for rec in records[("update_stats", "")]:
        assert rec.value.row("seq/bn")["update_norm"] > 0
