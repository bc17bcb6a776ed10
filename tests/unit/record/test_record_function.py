"""Inside tf.function and XLA: one trace for every step, in-graph gating, writers, metadata."""

from __future__ import annotations

import glob

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader

from tb_gradscope import format as fmt
from tb_gradscope.record import NoWriterError, Recorder
from tb_gradscope.scopes import leaf_scope
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


def _model_and_opt(seed=0):
    model = two_head_model(seed=seed)
    opt = keras.optimizers.SGD(0.05)
    opt.build(model.trainable_variables)
    return model, opt


@pytest.mark.slow
def test_no_retracing_across_100_steps(tmp_path):
    model, opt = _model_and_opt()
    rec = Recorder(logdir=str(tmp_path), every_n_steps=10, models={"online": model})
    traces = []

    @tf.function
    def step(x, y):
        traces.append(1)
        with rec.tape() as tape:
            losses = two_losses(model, x, y)
        rec.apply(opt, rec.gradients(tape, losses, model.trainable_variables))

    x, y = batch(0)
    for _ in range(100):
        step(x, y)
    rec.close()
    assert len(traces) == 1
    assert step.experimental_get_tracing_count() == 1
    assert int(rec.step.numpy()) == 100
    records = only(read_records(str(tmp_path)))
    assert sorted(records[(fmt.Kind.GRAD_STATS, "a")]) == list(range(0, 100, 10))


def _leaves(model):
    return [leaf_scope(f"online/{v.path}") for v in model.trainable_variables]


@pytest.mark.slow
@pytest.mark.parametrize("way", ["tape", "computed"])
def test_jit_compiled_step_computes_stats_inside_and_writes_outside(tmp_path, way):
    model, opt = _model_and_opt(seed=1)
    variables = model.trainable_variables
    rec = Recorder(logdir=str(tmp_path), every_n_steps=2, models={"online": model})

    @tf.function(jit_compile=True)
    def step(x, y):
        if way == "tape":
            with rec.tape() as tape:
                losses = two_losses(model, x, y)
            grads_and_vars = rec.gradients(tape, losses, variables)
        else:
            with tf.GradientTape(persistent=True) as tape:
                losses = two_losses(model, x, y)
                total = losses["a"] + losses["b"]
            returned = rec.record_gradients(
                {
                    k: list(zip(tape.gradient(loss, variables), variables))
                    for k, loss in losses.items()
                }
            )
            assert returned is not None and set(returned.tables) == {
                "gradscope/grad_stats/a",
                "gradscope/grad_stats/b",
                "gradscope/conflict/a|b",  # two losses: their conflict, on by default
            }
            grads_and_vars = list(zip(tape.gradient(total, variables), variables))
        rec.apply(opt, grads_and_vars)
        return rec.stats(), {k: tape.gradient(loss, variables) for k, loss in losses.items()}

    refs = {}
    for s in range(5):
        before = [v.numpy() for v in variables]
        stats, grads = step(*batch(s))
        rec.write(stats)
        grads = {k: [dense(g) for g in gs] for k, gs in grads.items()}
        refs[s] = (grads, before, [v.numpy() for v in variables])
    rec.close()
    assert step.experimental_get_tracing_count() == 1
    records = only(read_records(str(tmp_path)))
    leaves = _leaves(model)
    for loss in ("a", "b"):
        assert sorted(records[(fmt.Kind.GRAD_STATS, loss)]) == [0, 2, 4]
        for s, table in records[(fmt.Kind.GRAD_STATS, loss)].items():
            assert_table_close(
                table, np_grad_table(table.info.scopes, leaves, refs[s][0][loss]), loss
            )
    for s, table in records[(fmt.Kind.UPDATE_STATS, "")].items():
        expected = np_update_table(table.info.scopes, leaves, refs[s][1], refs[s][2])
        assert_table_close(table, expected, f"update {s}")


def test_write_inside_xla_names_the_pattern(tmp_path):
    model, opt = _model_and_opt()
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[model])

    @tf.function(jit_compile=True)
    def step(x, y):
        with rec.tape() as tape:
            losses = two_losses(model, x, y)
        rec.apply(opt, rec.gradients(tape, losses, model.trainable_variables))
        rec.write(rec.stats())

    with pytest.raises(ValueError, match="return rec.stats"):
        step(*batch(0))


def test_full_metadata_only_on_first_event_of_each_tag(tmp_path):
    model, opt = _model_and_opt()
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[model])

    @tf.function
    def step(x, y):
        with rec.tape() as tape:
            losses = two_losses(model, x, y)
        rec.apply(opt, rec.gradients(tape, losses, model.trainable_variables))

    for s in range(3):
        step(*batch(s))
    rec.close()
    (path,) = glob.glob(str(tmp_path / "*tfevents*"))
    seen: dict[str, list[bool]] = {}
    for event in event_file_loader.EventFileLoader(path).Load():
        for value in event.summary.value:
            seen.setdefault(value.tag, []).append(bool(value.metadata.plugin_data.content))
    assert seen.pop("gradscope/flowgraph") == [True]  # written once, at the first recorded step
    assert set(seen) == {
        "gradscope/grad_stats/a",
        "gradscope/grad_stats/b",
        "gradscope/conflict/a|b",
        "gradscope/update_stats",
    }
    for tag, has_metadata in seen.items():
        assert has_metadata == [True, False, False], tag


def test_default_writer_is_used_in_an_eager_loop(tmp_path):
    model, opt = _model_and_opt(seed=2)
    variables = model.trainable_variables
    rec = Recorder(every_n_steps=2, models={"online": model})
    writer = tf.summary.create_file_writer(str(tmp_path))
    refs = {}
    with writer.as_default():
        for s in range(4):  # eager: no tf.function read/update race to guard against
            x, y = batch(s)
            with tf.GradientTape() as tape:
                loss = two_losses(model, x, y)["a"]
            grads = tape.gradient(loss, variables)
            refs[s] = [dense(g) for g in grads]
            rec.record_gradients({"a": list(zip(grads, variables))})
            rec.apply(opt, list(zip(grads, variables)))
    writer.close()
    records = only(read_records(str(tmp_path)))
    series = records[(fmt.Kind.GRAD_STATS, "a")]
    assert sorted(series) == [0, 2]
    for s, table in series.items():
        assert_table_close(
            table, np_grad_table(table.info.scopes, _leaves(model), refs[s]), f"step {s}"
        )


def test_no_writer_is_a_clear_error():
    model, opt = _model_and_opt()
    rec = Recorder(every_n_steps=1, models=[model])
    x, y = batch(0)
    with tf.GradientTape() as tape:
        loss = two_losses(model, x, y)["a"]
    grads = tape.gradient(loss, model.trainable_variables)
    with pytest.raises(NoWriterError, match=r"Recorder\(logdir=...\)"):
        rec.record_gradients({"a": list(zip(grads, model.trainable_variables))})


def test_advance_moves_the_step_for_loops_that_apply_themselves(tmp_path):
    model, opt = _model_and_opt()
    variables = model.trainable_variables
    rec = Recorder(logdir=str(tmp_path), every_n_steps=3, models=[model])
    for s in range(7):
        x, y = batch(s)
        with tf.GradientTape() as tape:
            loss = two_losses(model, x, y)["a"]
        grads = tape.gradient(loss, variables)
        rec.record_gradients({"a": list(zip(grads, variables))})
        opt.apply_gradients(zip(grads, variables))
        rec.advance()
    rec.close()
    records = only(read_records(str(tmp_path)))
    assert sorted(records[(fmt.Kind.GRAD_STATS, "a")]) == [0, 3, 6]
    assert (fmt.Kind.UPDATE_STATS, "") not in records
    assert np.all(records[(fmt.Kind.GRAD_STATS, "a")][0].column("grad_vars")[:1] == 4)


def test_switching_default_writers_gives_each_file_its_metadata(tmp_path):
    model, opt = _model_and_opt(seed=6)
    variables = model.trainable_variables
    rec = Recorder(every_n_steps=1, models={"online": model})
    for s in range(4):
        run = "first" if s < 2 else "second"
        writer = tf.summary.create_file_writer(str(tmp_path / run))
        with writer.as_default():
            with tf.GradientTape() as tape:
                loss = two_losses(model, *batch(s))["a"]
            rec.record_gradients({"a": list(zip(tape.gradient(loss, variables), variables))})
            rec.advance()
        writer.close()
    records = read_records(str(tmp_path))
    assert sorted(records["first"][(fmt.Kind.GRAD_STATS, "a")]) == [0, 1]
    assert sorted(records["second"][(fmt.Kind.GRAD_STATS, "a")]) == [2, 3]


@pytest.mark.slow
def test_per_loss_gradients_through_an_lstm_while_loop(tmp_path):
    # Seed 03 shape: each loss's gradient goes through the LSTM's While loop,
    # computed inside the recorded-step branch.
    keras.utils.set_random_seed(0)
    inputs = keras.Input((5, 3))
    hidden = keras.layers.LSTM(8, name="lstm")(inputs)
    model = keras.Model(
        inputs,
        [keras.layers.Dense(1, name="a")(hidden), keras.layers.Dense(1, name="b")(hidden)],
        name="net",
    )
    variables = model.trainable_variables
    opt = keras.optimizers.Adam(0.01)
    opt.build(variables)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[model])

    @tf.function
    def step(x):
        with rec.tape() as tape:
            out_a, out_b = model(x)
            losses = {"a": tf.reduce_mean(out_a**2), "b": tf.reduce_mean(out_b**2)}
        rec.apply(opt, rec.gradients(tape, losses, variables))
        return {k: tape.gradient(loss, variables) for k, loss in losses.items()}

    grads = step(tf.constant(np.random.default_rng(0).normal(size=(4, 5, 3)).astype(np.float32)))
    rec.close()
    leaves = [leaf_scope(f"net/{v.path}") for v in variables]
    records = only(read_records(str(tmp_path)))
    for loss in ("a", "b"):
        table = records[(fmt.Kind.GRAD_STATS, loss)][0]
        expected = np_grad_table(table.info.scopes, leaves, [dense(g) for g in grads[loss]])
        assert_table_close(table, expected, loss)
        assert table.row("net/lstm")["grad_vars"] == 3


def _if_ops(graph):
    return [op for op in graph.get_operations() if op.type in ("If", "StatelessIf")]


@pytest.mark.parametrize("touch", [False, True])
def test_update_is_the_optimizer_step_whether_or_not_the_step_writes_a_variable_before_it(
    tmp_path, touch
):
    # The loss branch copies the variables for ||delta theta||; a write between
    # gradients() and apply() must not count as update (a copy of its own is taken).
    model, opt = _model_and_opt(seed=2)
    variables = model.trainable_variables
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models={"online": model})

    @tf.function
    def step(x, y):
        with rec.tape() as tape:
            losses = two_losses(model, x, y)
        grads_and_vars = rec.gradients(tape, losses, variables)
        if touch:
            variables[0].assign(variables[0] * 0.5)
        rec.apply(opt, grads_and_vars)

    refs = {}
    for s in range(2):
        halved = [v.numpy() * (0.5 if touch and i == 0 else 1.0) for i, v in enumerate(variables)]
        step(*batch(s))
        refs[s] = (halved, [v.numpy() for v in variables])
    rec.close()
    graph = step.get_concrete_function(*batch(0)).graph
    assert len(_if_ops(graph)) == (3 if touch else 2)  # loss branch (+ own copy) + update branch
    records = only(read_records(str(tmp_path)))
    for s, table in records[(fmt.Kind.UPDATE_STATS, "")].items():
        assert_table_close(
            table, np_update_table(table.info.scopes, _leaves(model), *refs[s]), f"update {s}"
        )
