"""Acceptance: a two-loss model (shared trunk, head b behind stop_gradient), both ways in.

Every logged stat is read back through TensorBoard's data provider and compared
with a numpy recomputation from gradients taken by an independent eager tape.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.record import Recorder
from tests.support.record_fixtures import (
    assert_table_close,
    batch,
    dense,
    np_grad_table,
    np_update_table,
    only,
    read_records,
    two_head_model,
    two_losses,
)

STEPS = 7
EVERY = 3
RECORDED = [0, 3, 6]


def _step_fn(way, rec, model, opt, var_list=None):
    """The training step; returns each loss's gradients as the step computed them.

    References come from inside the step, not from an eager replay: with Keras 3
    on TF 2.21 a tf.function's forward pass sometimes reads weights the same
    step's optimizer already updated, so an eager replay can differ.
    """
    variables = model.trainable_variables

    @tf.function
    def step(x, y):
        if way == "tape":
            with rec.tape() as tape:
                losses = two_losses(model, x, y)
            grads_and_vars = rec.gradients(tape, losses, variables)
        else:
            with tf.GradientTape(persistent=True) as tape:
                losses = two_losses(model, x, y)
                total = losses["a"] + losses["b"]
            rec.record_gradients(
                {
                    name: list(zip(tape.gradient(loss, variables), variables))
                    for name, loss in losses.items()
                },
                losses=losses,
            )
            grads_and_vars = list(zip(tape.gradient(total, variables), variables))
        if var_list is not None:
            keep = {id(v) for v in var_list}
            grads_and_vars = [(g, v) for g, v in grads_and_vars if id(v) in keep]
        rec.apply(opt, grads_and_vars)
        return {name: tape.gradient(loss, variables) for name, loss in losses.items()}

    return step


def _train(way, logdir, var_list_layers=None):
    model = two_head_model()
    variables = model.trainable_variables
    opt = keras.optimizers.Adam(0.05)
    opt.build(variables)
    rec = Recorder(logdir=logdir, every_n_steps=EVERY, models={"online": model})
    var_list = None
    if var_list_layers:
        var_list = [w for name in var_list_layers for w in model.get_layer(name).trainable_weights]
    step = _step_fn(way, rec, model, opt, var_list)
    refs = {}
    for s in range(STEPS):
        before = [v.numpy() for v in variables]
        grads = step(*batch(s))
        grads = {k: [dense(g) for g in gs] for k, gs in grads.items()}
        refs[s] = (grads, before, [v.numpy() for v in variables])
    rec.close()
    names = [f"online/{v.path}" for v in variables]
    return rec, refs, names


@pytest.fixture(scope="module", params=["tape", "computed"])
def trained(request, tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp(f"two_loss_{request.param}"))
    rec, refs, names = _train(request.param, logdir)
    return request.param, only(read_records(logdir)), refs, names, rec


def test_every_logged_stat_equals_numpy(trained):
    _, records, refs, names, _ = trained
    leaves = [scopes_lib.leaf_scope(n) for n in names]
    expected_scopes = tuple(
        scopes_lib.tree_order(s for leaf in leaves for s in scopes_lib.ancestors(leaf))
    )
    for loss in ("a", "b"):
        series = records[(fmt.Kind.GRAD_STATS, loss)]
        assert sorted(series) == RECORDED
        for step, table in series.items():
            assert table.info.scopes == expected_scopes
            expected = np_grad_table(table.info.scopes, leaves, refs[step][0][loss])
            assert_table_close(table, expected, f"loss {loss} step {step}")
    updates = records[(fmt.Kind.UPDATE_STATS, "")]
    assert sorted(updates) == RECORDED
    for step, table in updates.items():
        _, before, after = refs[step]
        assert_table_close(
            table, np_update_table(table.info.scopes, leaves, before, after), f"update {step}"
        )


def test_stop_gradient_scope_has_no_gradient_not_zero(trained):
    _, records, _, _, _ = trained
    for table in records[(fmt.Kind.GRAD_STATS, "b")].values():
        assert table.row("online/trunk")["grad_vars"] == 0
        assert table.row("online/head_a")["grad_vars"] == 0
        assert table.row("online/head_b")["grad_vars"] == 2 and table.row("online/head_b")["l2"] > 0
    for table in records[(fmt.Kind.GRAD_STATS, "a")].values():
        assert table.row("online/trunk")["grad_vars"] == 2 and table.row("online/trunk")["l2"] > 0
        assert table.row("online/head_b")["grad_vars"] == 0


def test_metadata_identifies_records_and_steps_continue(trained):
    _, records, _, _, rec = trained
    assert int(rec.step.numpy()) == STEPS
    info = records[(fmt.Kind.GRAD_STATS, "a")][0].info
    assert (
        info.attrs["every_n_steps"] == EVERY
        and info.columns == fmt.KIND_SPECS[fmt.Kind.GRAD_STATS].columns
    )


def test_var_list_excluded_scope_has_zero_update_but_a_gradient(tmp_path):
    _, refs, _ = _train("computed", str(tmp_path), var_list_layers=["trunk", "head_a"])
    records = only(read_records(str(tmp_path)))
    for step in RECORDED:
        update = records[(fmt.Kind.UPDATE_STATS, "")][step]
        grads = records[(fmt.Kind.GRAD_STATS, "b")][step]
        assert update.row("online/head_b")["update_norm"] == 0.0
        assert update.row("online/head_b")["weight_norm"] > 0
        assert update.row("online/trunk")["update_norm"] > 0
        assert grads.row("online/head_b")["l2"] > 0


@pytest.mark.parametrize("in_function", [False, True])
def test_gradients_are_bitwise_those_of_the_summed_loss(tmp_path, in_function):
    model = two_head_model(seed=3)
    variables = model.trainable_variables
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[model])

    def both(x, y):
        with tf.GradientTape() as plain_tape:
            with rec.tape() as tape:
                losses = two_losses(model, x, y)
                losses["c"] = tf.reduce_mean(model(x)[0] ** 3)
            total = losses["a"] + losses["b"] + losses["c"]
        ours = [g for g, _ in rec.gradients(tape, losses, variables)]
        return ours, plain_tape.gradient(total, variables)

    fn = tf.function(both) if in_function else both
    ours, plain = fn(*batch(0))
    for mine, theirs, v in zip(ours, plain, variables):
        assert np.array_equal(mine.numpy(), theirs.numpy()), v.path


@pytest.mark.slow
def test_resumed_run_continues_its_steps(tmp_path):
    logdir = str(tmp_path)
    model = two_head_model(seed=5)
    opt = keras.optimizers.SGD(0.1)
    opt.build(model.trainable_variables)

    def run(rec, steps):
        step = _step_fn("tape", rec, model, opt)
        for s in range(steps):
            step(*batch(s))
        rec.close()

    first = Recorder(logdir=logdir, every_n_steps=2, models={"online": model})
    run(first, 5)
    path = tf.train.Checkpoint(recorder=first).save(str(tmp_path / "ckpt" / "c"))
    second = Recorder(logdir=logdir, every_n_steps=2, models={"online": model})
    tf.train.Checkpoint(recorder=second).restore(path).assert_consumed()
    assert int(second.step.numpy()) == 5
    run(second, 4)
    assert int(second.step.numpy()) == 9
    records = only(read_records(logdir))
    assert sorted(records[(fmt.Kind.GRAD_STATS, "a")]) == [0, 2, 4, 6, 8]
    assert sorted(records[(fmt.Kind.UPDATE_STATS, "")]) == [0, 2, 4, 6, 8]


@pytest.mark.parametrize("way", ["tape", "computed"])
def test_recording_never_changes_training_results(tmp_path, way):
    # Eager, so both runs are deterministic: the weights must be bitwise equal.
    def train(record):
        model = two_head_model(seed=9)
        variables = model.trainable_variables
        opt = keras.optimizers.Adam(0.05)
        rec = Recorder(logdir=str(tmp_path / str(record)), every_n_steps=2, models=[model])
        for s in range(4):
            x, y = batch(s)
            if record and way == "tape":
                with rec.tape() as tape:
                    losses = two_losses(model, x, y)
                rec.apply(opt, rec.gradients(tape, losses, variables))
                continue
            with tf.GradientTape(persistent=True) as tape:
                losses = two_losses(model, x, y)
                total = losses["a"] + losses["b"]
            grads_and_vars = list(zip(tape.gradient(total, variables), variables))
            if record:
                rec.record_gradients(
                    {
                        k: list(zip(tape.gradient(loss, variables), variables))
                        for k, loss in losses.items()
                    }
                )
                rec.apply(opt, grads_and_vars)
            else:
                opt.apply_gradients(grads_and_vars)
        rec.close()
        return [v.numpy() for v in variables]

    for with_rec, without in zip(train(True), train(False)):
        assert np.array_equal(with_rec, without)
