"""Seed 02 (DQN 3.0): gradients started from q_all with explicit output gradients."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.record import Recorder, StartPoint
from tb_gradscope.scopes import leaf_scope
from tests.support.record_fixtures import (
    assert_table_close,
    dense,
    np_grad_table,
    only,
    read_records,
)

ACTIONS = 3


def _q_net(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(6, activation="relu", name="l1")(inputs)
    q_all = keras.layers.Dense(ACTIONS, name="q")(hidden)
    return keras.Model(inputs, q_all, name="network")


def _batch(step):
    rng = np.random.default_rng(step)
    x = tf.constant(rng.normal(size=(8, 4)).astype(np.float32))
    actions = tf.constant(rng.integers(0, ACTIONS, size=8))
    delta = tf.constant(rng.normal(size=8).astype(np.float32))
    targets = tf.one_hot(actions, ACTIONS) * delta[:, None]  # DQN 3.0 `targets`
    return x, targets


@pytest.mark.parametrize("way", ["tape", "computed"])
def test_start_point_gradients_are_recorded_and_applied(tmp_path, way):
    model = _q_net()
    variables = model.trainable_variables
    opt = keras.optimizers.SGD(0.01)
    opt.build(variables)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[model])

    @tf.function
    def step(x, targets):
        if way == "tape":
            with tf.GradientTape() as plain_tape, rec.tape() as tape:
                q_all = model(x)
            start = StartPoint(q_all, output_gradients=-targets)
            grads_and_vars = rec.gradients(tape, {"q_out": start}, variables)
        else:  # tf.gradients(q_all, vars, grad_ys=-targets) style: no scalar loss
            with tf.GradientTape() as plain_tape, tf.GradientTape() as tape:
                q_all = model(x)
            grads = tape.gradient(q_all, variables, output_gradients=-targets)
            grads_and_vars = list(zip(grads, variables))
            rec.record_gradients(
                {"q_out": grads_and_vars},
                losses={"q_out": StartPoint(q_all, output_gradients=-targets)},
            )
        rec.apply(opt, grads_and_vars)
        return [g for g, _ in grads_and_vars], plain_tape.gradient(q_all, variables, -targets)

    refs = {}
    for s in range(3):
        got, expected = step(*_batch(s))
        refs[s] = [dense(g) for g in got]
        for g, e in zip(got, expected):
            assert np.array_equal(g.numpy(), e.numpy())
    rec.close()
    records = only(read_records(str(tmp_path)))
    leaves = [leaf_scope(f"network/{v.path}") for v in variables]
    for s, table in records[(fmt.Kind.GRAD_STATS, "q_out")].items():
        assert_table_close(table, np_grad_table(table.info.scopes, leaves, refs[s]), f"step {s}")
    graph = rec.flowgraph
    assert graph is not None
    assert [(loss.name, loss.kind) for loss in graph.losses] == [("q_out", "start_point")]


def test_start_point_and_loss_together_sum_their_gradients(tmp_path):
    model = _q_net(seed=1)
    variables = model.trainable_variables
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[model])
    x, targets = _batch(0)
    with rec.tape() as tape:
        q_all = model(x)
        l2 = 1e-3 * tf.add_n([tf.reduce_sum(v**2) for v in variables])
    losses = {"q_out": StartPoint(q_all, output_gradients=-targets), "l2": l2}
    ours = [g for g, _ in rec.gradients(tape, losses, variables)]
    rec.close()
    for g, v in zip(ours, variables):
        expected = tape.gradient(q_all, v, output_gradients=-targets) + tape.gradient(l2, v)
        np.testing.assert_allclose(g.numpy(), expected.numpy(), rtol=1e-5, atol=1e-7)
    records = only(read_records(str(tmp_path)))
    assert {name for kind, name in records if kind == fmt.Kind.GRAD_STATS} == {"q_out", "l2"}


def test_start_point_with_mismatched_output_gradients_names_the_fix(tmp_path):
    model = _q_net()
    rec = Recorder(logdir=str(tmp_path), models=[model])
    with rec.tape() as tape:
        q_all = model(tf.zeros((8, 4)))
    with pytest.raises(ValueError, match=r"start point 'q_out': output_gradients have shape \[8\]"):
        rec.gradients(tape, {"q_out": StartPoint(q_all, tf.zeros((8,)))}, model.trainable_variables)
