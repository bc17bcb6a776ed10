"""Gradient conflict: per pair of losses and shared scope, the cosine of their
gradients, recorded as CONFLICT tables and read back through TensorBoard."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.record import Recorder
from tests.support.record_fixtures import (
    batch,
    dense,
    members,
    np_cosine,
    only,
    read_records,
    shared_trunk_model,
    two_losses,
)


def _variables():
    """Two scopes: `net/shared` (both losses) and `net/own_a` (loss a only)."""
    with tf.name_scope("net"):
        shared = tf.Variable(np.arange(1.0, 7.0, dtype=np.float32).reshape(2, 3), name="shared/w")
        own = tf.Variable(np.ones(4, np.float32), name="own_a/w")
    return shared, own


def _record_pair(logdir, loss_fn, in_function):
    shared, own = _variables()
    rec = Recorder(logdir=logdir, every_n_steps=1, variables=[shared, own])
    opt = keras.optimizers.SGD(0.0)

    def step():
        with rec.tape() as tape:
            losses = loss_fn(shared, own)
        rec.apply(opt, rec.gradients(tape, losses, [shared, own]))

    (tf.function(step) if in_function else step)()
    rec.close()
    return only(read_records(logdir))


@pytest.mark.parametrize("in_function", [False, True])
def test_opposite_gradients_on_a_shared_scope_read_minus_one(tmp_path, in_function):
    direction = tf.constant(np.linspace(-1.0, 2.0, 6).reshape(2, 3).astype(np.float32))

    def losses(shared, own):
        pull = tf.reduce_sum(shared * direction)
        return {"a": pull + tf.reduce_sum(own**2), "b": -3.0 * pull}

    records = _record_pair(str(tmp_path), losses, in_function)
    table = records[(fmt.Kind.CONFLICT, "a|b")][0]
    assert table.info.scopes == ("net", "net/shared")  # net/own_a: only a reaches it
    assert table.info.attrs["losses"] == ["a", "b"]
    assert table.info.columns == ("cosine",)
    assert table.row("net/shared")["cosine"] == pytest.approx(-1.0, abs=1e-4)
    assert -1.0 < table.row("net")["cosine"] < 0.0  # a's own scope dilutes the opposition


@pytest.mark.parametrize("in_function", [False, True])
def test_orthogonal_gradients_read_zero(tmp_path, in_function):
    u = tf.constant([[1.0, 0.0, 1.0], [0.0, 2.0, 0.0]])
    v = tf.constant([[0.0, 3.0, 0.0], [1.0, 0.0, -1.0]])

    def losses(shared, own):
        return {"a": tf.reduce_sum(shared * u), "b": tf.reduce_sum(shared * v)}

    records = _record_pair(str(tmp_path), losses, in_function)
    table = records[(fmt.Kind.CONFLICT, "a|b")][0]
    assert table.info.scopes == ("net", "net/shared")
    np.testing.assert_allclose(table.column("cosine"), [0.0, 0.0], atol=1e-4)


def test_cosines_equal_numpy_on_a_shared_trunk_at_recorded_steps(tmp_path):
    model = shared_trunk_model()
    variables = model.trainable_variables
    opt = keras.optimizers.Adam(0.05)
    opt.build(variables)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=2, models={"net": model})

    @tf.function
    def step(x, y):
        with rec.tape() as tape:
            losses = two_losses(model, x, y)
            losses["c"] = tf.reduce_mean(model(x)[1] ** 2)
        rec.apply(opt, rec.gradients(tape, losses, variables))
        return {name: tape.gradient(loss, variables) for name, loss in losses.items()}

    refs = {}
    for s in range(4):
        refs[s] = {k: [dense(g) for g in gs] for k, gs in step(*batch(s)).items()}
    rec.close()
    records = only(read_records(str(tmp_path)))
    leaves = [scopes_lib.leaf_scope(f"net/{v.path}") for v in variables]
    assert {name for kind, name in records if kind == fmt.Kind.CONFLICT} == {"a|b", "a|c", "b|c"}
    for name in ("a|b", "a|c", "b|c"):
        a, b = name.split("|")
        series = records[(fmt.Kind.CONFLICT, name)]
        assert sorted(series) == [0, 2]
        for s, table in series.items():
            for scope in table.info.scopes:
                expected = np_cosine(refs[s][a], refs[s][b], members(scope, leaves))
                assert table.row(scope)["cosine"] == pytest.approx(expected, abs=1e-5), (
                    name,
                    s,
                    scope,
                )
    # b and c read head_b only, a reads head_a only: they share the trunk and the root.
    assert records[(fmt.Kind.CONFLICT, "a|b")][0].info.scopes == ("net", "net/trunk")
    assert records[(fmt.Kind.CONFLICT, "b|c")][0].info.scopes == ("net", "net/head_b", "net/trunk")


def test_no_conflict_records_for_one_loss_or_when_switched_off(tmp_path):
    model = shared_trunk_model(seed=1)
    variables = model.trainable_variables
    for label, losses_of, conflict in (
        ("one", lambda losses: {"a": losses["a"]}, True),
        ("off", dict, False),
    ):
        logdir = str(tmp_path / label)
        rec = Recorder(logdir=logdir, every_n_steps=1, models={"net": model}, conflict=conflict)
        with rec.tape() as tape:
            losses = losses_of(two_losses(model, *batch(0)))
        rec.apply(keras.optimizers.SGD(0.0), rec.gradients(tape, losses, variables))
        rec.close()
        records = only(read_records(logdir))
        assert not [key for key in records if key[0] == fmt.Kind.CONFLICT], label
        assert sorted(name for kind, name in records if kind == fmt.Kind.GRAD_STATS) == sorted(
            losses
        )


def test_conflict_recording_never_changes_training(tmp_path):
    def train(record):
        model = shared_trunk_model(seed=4)
        variables = model.trainable_variables
        opt = keras.optimizers.Adam(0.05)
        rec = Recorder(
            logdir=str(tmp_path / str(record)),
            every_n_steps=2,
            models={"net": model},
            conflict=record,
        )
        for s in range(3):
            with rec.tape() as tape:
                losses = two_losses(model, *batch(s))
            rec.apply(opt, rec.gradients(tape, losses, variables))
        rec.close()
        return [v.numpy() for v in variables]

    for with_conflict, without in zip(train(True), train(False)):
        assert np.array_equal(with_conflict, without)


def test_one_gram_gives_every_pair_on_big_small_and_missing_gradients():
    # Five losses over a big variable (its own matmul), small ones (one grouped
    # product) and None gradients: every pair's cosines equal numpy's.
    from tb_gradscope.record import _conflict as conflict
    from tb_gradscope.record import _stats as stats
    from tb_gradscope.record._reductions import BIG

    names = ["m/big/w", "m/small/a", "m/small/b", "m/other/c"]
    shapes = [(BIG + 3,), (4, 3), (5,), (2, 2)]
    layout = scopes_lib.build_layout(names)
    rollup = stats.RollUp.from_layout(layout)
    rng = np.random.default_rng(4)
    losses = [f"l{k}" for k in range(5)]
    missing = {("l1", 2), ("l3", 0), ("l3", 3), ("l4", 1), ("l4", 2), ("l4", 3)}
    grads = {
        loss: [
            None if (loss, i) in missing else rng.normal(size=s).astype(np.float32)
            for i, s in enumerate(shapes)
        ]
        for loss in losses
    }
    aligned = {
        loss: [None if g is None else tf.constant(g) for g in gs] for loss, gs in grads.items()
    }
    tables = conflict.conflict_tables(aligned, layout, rollup)
    assert set(tables) == {
        pair
        for pair in conflict.loss_pairs(losses)
        if conflict.shared_rows(grads[pair[0]], grads[pair[1]], layout)
    }
    for (a, b), (rows, make) in tables.items():
        got = make().numpy()[:, 0]
        want = [
            np_cosine(grads[a], grads[b], members(layout.scopes[r], layout.variable_leaf))
            for r in rows
        ]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{a}|{b}")


@pytest.mark.parametrize("in_function", [False, True])
def test_conflict_rows_that_change_between_steps_read_back_at_every_step(tmp_path, in_function):
    """Losses that share a scope at one step and not at the next (issue 57,
    item 6: "stored table has shape (3, 1), metadata says (2, 1)"): eagerly,
    or as two traces of one tf.function, each step's table is written under
    metadata that names its own rows, so the reader decodes every step, with
    the cosines of that step's rows."""
    from tb_gradscope.read.logdir import load_logdir

    shared, own = _variables()
    rec = Recorder(logdir=str(tmp_path / "run"), every_n_steps=1, variables=[shared, own])
    opt = keras.optimizers.SGD(0.0)

    def step(odd: bool):
        with rec.tape() as tape:
            a = tf.reduce_sum(shared**2) + tf.reduce_sum(own**2)
            b = -tf.reduce_sum(shared**2) + (tf.reduce_sum(own) if odd else 0.0)
        rec.apply(opt, rec.gradients(tape, {"a": a, "b": b}, [shared, own]))

    run = tf.function(step) if in_function else step
    for i in range(3):
        run(bool(i % 2))
    rec.close()
    (logs,) = load_logdir(str(tmp_path))
    assert not logs.warnings, logs.warnings
    series = dict(logs.cosines[("a", "b")])
    assert sorted(series) == [0, 1, 2]
    assert set(series[0]) == set(series[2]) == {"net", "net/shared"}
    assert set(series[1]) == {"net", "net/shared", "net/own_a"}
    assert series[0]["net/shared"] == pytest.approx(-1.0)
    assert series[1]["net/own_a"] == pytest.approx(1.0)  # 2 * own and ones: one direction
