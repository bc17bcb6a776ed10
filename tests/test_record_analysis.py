"""The seam to static analysis: the traced step is analyzed once and its FlowGraph written."""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

import tb_gradscope.analysis as analysis
from tb_gradscope import format as fmt
from tb_gradscope.record import GradscopeWarning, Recorder
from tests.record_fixtures import batch, only, read_records, two_head_model, two_losses


def _setup(tmp_path, every=2):
    model = two_head_model(seed=7)
    opt = keras.optimizers.SGD(0.05)
    opt.build(model.trainable_variables)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=every, models={"online": model})
    return model, opt, rec


def _tape_step(rec, model, opt):
    def step(x, y):
        with rec.tape() as tape:
            losses = two_losses(model, x, y)
        rec.apply(opt, rec.gradients(tape, losses, model.trainable_variables))

    return step


def test_traced_step_writes_its_flowgraph_once(tmp_path):
    model, opt, rec = _setup(tmp_path)
    step = tf.function(_tape_step(rec, model, opt))
    for s in range(5):
        step(*batch(s))
    rec.close()
    records = only(read_records(str(tmp_path)))
    flowgraphs = records[(fmt.Kind.FLOWGRAPH, "")]
    assert sorted(flowgraphs) == [0]
    (doc,) = flowgraphs[0]
    graph = fmt.FlowGraph.from_json(doc)
    assert tuple(graph.scopes) == records[(fmt.Kind.GRAD_STATS, "a")][0].info.scopes
    assert graph.state("b", "online/trunk") == fmt.BLOCKED  # behind tf.stop_gradient
    assert graph.state("a", "online/trunk") == fmt.UPDATES
    assert graph.state("a", "online/head_b") == fmt.INDEPENDENT
    assert rec.flowgraph == graph


def test_seam_gets_the_traced_graph_losses_and_variable_scopes(tmp_path, monkeypatch):
    calls = []
    real = analysis.analyze_graph

    def spy(graph, losses, variable_scopes, **kwargs):
        calls.append((graph, dict(losses), list(variable_scopes), kwargs))
        return real(graph, losses, variable_scopes, **kwargs)

    monkeypatch.setattr(analysis, "analyze_graph", spy)
    model, opt, rec = _setup(tmp_path)
    step = tf.function(_tape_step(rec, model, opt))
    step(*batch(0))
    step(*batch(1))
    assert len(calls) == 1  # at trace time only
    graph, losses, variable_scopes, kwargs = calls[0]
    assert isinstance(graph, tf.Graph) and graph.building_function
    assert set(losses) == {"a", "b"} and all(t.graph is graph for t in losses.values())
    assert [scope for _, scope in variable_scopes] == list(rec.layout.layout.variable_leaf)
    assert kwargs["scopes"] == list(rec.layout.layout.scopes)
    op_types = {op.type for op in graph.get_operations()}
    assert "AssignSubVariableOp" in op_types or any("Apply" in t for t in op_types)


def test_eager_loop_is_analyzed_with_rec_analyze(tmp_path):
    model, opt, rec = _setup(tmp_path)
    variables = model.trainable_variables

    def step(x, y):
        with tf.GradientTape(persistent=True) as tape:
            losses = two_losses(model, x, y)
            total = losses["a"] + losses["b"]
        rec.record_gradients(
            {k: list(zip(tape.gradient(loss, variables), variables)) for k, loss in losses.items()},
            losses=losses,
        )
        rec.apply(opt, list(zip(tape.gradient(total, variables), variables)))

    before = [v.numpy() for v in variables]
    graph = rec.analyze(step, *batch(0))
    assert int(rec.step.numpy()) == 0  # tracing ran nothing
    assert all((b == v.numpy()).all() for b, v in zip(before, variables))
    assert graph is not None and graph.state("b", "online/trunk") == fmt.BLOCKED
    for s in range(3):
        step(*batch(s))
    rec.close()
    records = only(read_records(str(tmp_path)))
    assert sorted(records[(fmt.Kind.FLOWGRAPH, "")]) == [0]
    assert sorted(records[(fmt.Kind.GRAD_STATS, "b")]) == [0, 2]


def test_analyze_losses_traces_a_loss_function_from_tensor_specs_and_runs_nothing(tmp_path):
    model, opt, rec = _setup(tmp_path)
    variables = model.trainable_variables
    before = [v.numpy() for v in variables]
    spec = tf.TensorSpec([None, 5])
    graph = rec.analyze_losses(
        lambda x, y: two_losses(model, x, y), opt, variables, spec, tf.TensorSpec([None, 1])
    )
    assert int(rec.step.numpy()) == 0 and int(opt.iterations.numpy()) == 0
    assert all((b == v.numpy()).all() for b, v in zip(before, variables))
    assert graph is not None and graph.state("b", "online/trunk") == fmt.BLOCKED
    assert graph.state("a", "online/trunk") == fmt.UPDATES


def test_analyze_losses_of_an_untraceable_function_only_warns(tmp_path):
    model, opt, rec = _setup(tmp_path)

    def eager_only(x, y):
        return {"a": tf.constant(float(two_losses(model, x, y)["a"].numpy()))}

    with pytest.warns(GradscopeWarning, match="analyze_losses could not trace 'eager_only'"):
        assert rec.analyze_losses(eager_only, opt, model.trainable_variables, *batch(0)) is None


def test_failing_analysis_only_warns_and_stats_are_still_recorded(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("analysis exploded")

    monkeypatch.setattr(analysis, "analyze_graph", broken)
    model, opt, rec = _setup(tmp_path)
    step = tf.function(_tape_step(rec, model, opt))
    with pytest.warns(GradscopeWarning, match="static analysis of the traced step failed"):
        for s in range(3):
            step(*batch(s))
    rec.close()
    records = only(read_records(str(tmp_path)))
    assert (fmt.Kind.FLOWGRAPH, "") not in records
    assert sorted(records[(fmt.Kind.GRAD_STATS, "a")]) == [0, 2]


def test_loop_that_applies_itself_is_analyzed_at_advance(tmp_path):
    model, opt, rec = _setup(tmp_path)
    variables = model.trainable_variables

    @tf.function
    def step(x, y):
        with tf.GradientTape(persistent=True) as tape:
            losses = two_losses(model, x, y)
            total = losses["a"] + losses["b"]
        rec.record_gradients(
            {k: list(zip(tape.gradient(loss, variables), variables)) for k, loss in losses.items()},
            losses=losses,
        )
        opt.apply_gradients(zip(tape.gradient(total, variables), variables))
        rec.advance()

    for s in range(3):
        step(*batch(s))
    rec.close()
    records = only(read_records(str(tmp_path)))
    (doc,) = records[(fmt.Kind.FLOWGRAPH, "")][0]
    graph = fmt.FlowGraph.from_json(doc)
    assert graph.state("b", "online/trunk") == fmt.BLOCKED
    assert graph.applied is not None and "online/trunk" in graph.applied
