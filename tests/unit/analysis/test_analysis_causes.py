"""Why a gradient path is cut: each cause on a real traced graph, plus bad input."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.analysis import AnalysisError, analyze_function, analyze_graph, fingerprint
from tb_gradscope.format.flowgraph import FlowGraph

W = tf.Variable(np.ones((3, 3), "float32"), name="net/kernel")
X = tf.TensorSpec([2, 3])
SCOPES = [(W, "net")]


def run(fn):
    return analyze_function(fn, X, variable_scopes=SCOPES)


def only_edge(fg):
    [edge] = fg.blocked_edges
    return edge


def test_argmax_is_non_differentiable():
    fg = run(lambda x: {"l": tf.reduce_sum(tf.cast(tf.argmax(x @ W, axis=1), tf.float32))})
    assert fg.cells["l"]["net"] == "blocked"
    edge = only_edge(fg)
    assert (edge.op_type, edge.cause) == ("ArgMax", "non_differentiable")
    assert edge.source.file == "tests/unit/analysis/test_analysis_causes.py"


def test_int_cast_is_an_integer_cut():
    fg = run(lambda x: {"l": tf.reduce_sum(tf.cast(tf.cast(x @ W, tf.int32), tf.float32))})
    assert fg.cells["l"]["net"] == "blocked"
    edge = only_edge(fg)
    assert (edge.op_type, edge.cause) == ("Cast", "integer")


def test_numpy_function_has_no_gradient():
    def step(x):
        y = tf.numpy_function(lambda a: a * 2, [x @ W], tf.float32)
        return {"l": tf.reduce_sum(y)}

    fg = run(step)
    assert fg.cells["l"]["net"] == "blocked"
    edge = only_edge(fg)
    assert (edge.op_type, edge.cause) == ("PyFunc", "no_gradient")


def test_py_function_is_differentiable():
    def step(x):
        y = tf.py_function(lambda a: a * 2, [x @ W], tf.float32)
        return {"l": tf.reduce_sum(y)}

    fg = run(step)
    assert fg.cells["l"]["net"] == "updates"
    assert fg.blocked_edges == []


@tf.custom_gradient
def _no_grad(x):
    return tf.identity(x), lambda dy: None


@tf.custom_gradient
def _doubled_grad(x):
    return x * 1.0, lambda dy: dy * 2.0


def test_custom_gradient_returning_none_blocks():
    fg = run(lambda x: {"l": tf.reduce_sum(_no_grad(x @ W))})
    assert fg.cells["l"]["net"] == "blocked"
    edge = only_edge(fg)
    assert (edge.op_type, edge.cause) == ("IdentityN", "custom_gradient_none")


def test_custom_gradient_with_a_gradient_is_not_a_cut():
    fg = run(lambda x: {"l": tf.reduce_sum(_doubled_grad(x @ W))})
    assert fg.cells["l"]["net"] == "updates"
    assert fg.blocked_edges == []


def test_custom_gradient_that_cannot_be_evaluated_is_unknown():
    def grad_needing_eager(dy):
        return dy * float(dy.numpy().sum())  # fails on a symbolic tensor

    @tf.custom_gradient
    def odd(x):
        return tf.identity(x), grad_needing_eager

    fg = run(lambda x: {"l": tf.reduce_sum(odd(x @ W))})
    assert fg.cells["l"]["net"] == "blocked"
    assert {e.cause for e in fg.blocked_edges} == {"unknown_gradient"}


def test_stop_gradient_inside_cond_and_nested_function_is_found():
    @tf.function
    def inner(h):
        return tf.stop_gradient(h) * 2.0

    def step(x):
        h = x @ W
        y = tf.cond(tf.reduce_sum(x) > 0, lambda: inner(h), lambda: inner(h) + 1.0)
        return {"l": tf.reduce_sum(y)}

    fg = run(step)
    assert fg.cells["l"]["net"] == "blocked"
    assert {e.cause for e in fg.blocked_edges} == {"stop_gradient"}


def test_while_loop_output_depends_only_on_its_carried_inputs():
    v = tf.Variable(1.0, name="other/v")

    def step(x):
        def body(i, a, b):
            return i + 1, a @ W, b * 1.0

        _, a, b = tf.while_loop(lambda i, a, b: i < 3, body, [0, x, v * 1.0])
        return {"a": tf.reduce_sum(a), "b": tf.reduce_sum(tf.stop_gradient(a)) + b}

    fg = analyze_function(step, X, variable_scopes=SCOPES + [(v, "other")])
    assert fg.cells["a"]["net"] == "updates"
    assert fg.cells["a"]["other"] == "independent"
    assert fg.cells["b"]["other"] == "updates"
    assert fg.cells["b"]["net"] == "blocked"


def test_flowgraph_round_trips_and_fingerprint_is_stable():
    def step(x):
        return {"l": tf.reduce_sum(tf.stop_gradient(x @ W))}

    first, second = run(step), run(step)
    assert first == second and fingerprint(first) == fingerprint(second)
    assert FlowGraph.from_json(first.to_json()) == first
    other = run(lambda x: {"l": tf.reduce_sum(x @ W)})
    assert fingerprint(other) != fingerprint(first)


def test_loss_not_in_graph_is_a_clear_error():
    other = tf.Graph()
    with other.as_default():
        stray = tf.constant(1.0)
    cf = tf.function(lambda x: tf.reduce_sum(x @ W)).get_concrete_function(X)
    with pytest.raises(AnalysisError, match="loss 'l'.*not to the graph being analysed"):
        analyze_graph(cf.graph, {"l": stray}, SCOPES)
    with pytest.raises(AnalysisError, match="loss 'e' is EagerTensor"):
        analyze_graph(cf.graph, {"e": tf.constant(1.0)}, SCOPES)


def test_no_variables_is_a_clear_error():
    cf = tf.function(lambda x: tf.reduce_sum(x @ W)).get_concrete_function(X)
    with pytest.raises(AnalysisError, match="no variables given"):
        analyze_graph(cf.graph, {"l": cf.outputs[0]}, [])


def test_duplicate_loss_names_are_a_clear_error():
    cf = tf.function(lambda x: tf.reduce_sum(x @ W)).get_concrete_function(X)
    loss = cf.outputs[0]
    with pytest.raises(AnalysisError, match="duplicate loss name 'l'"):
        analyze_graph(cf.graph, [("l", loss), ("l", loss)], SCOPES)


def test_integer_loss_and_unknown_loss_name_are_clear_errors():
    with pytest.raises(AnalysisError, match="dtype int32"):
        analyze_function(lambda x: {"n": tf.shape(x)[0]}, X, variable_scopes=SCOPES)
    with pytest.raises(AnalysisError, match=r"losses \['nope'\] are not returned"):
        analyze_function(
            lambda x: {"l": tf.reduce_sum(x @ W)}, X, losses=["nope"], variable_scopes=SCOPES
        )


def test_untraceable_function_says_what_is_lost():
    def eager_only(x):
        return {"l": tf.reduce_sum(x @ W) * float(x.numpy().sum())}

    with pytest.raises(AnalysisError, match="cannot tell|'blocked'|independent"):
        run(eager_only)


def test_unused_variable_is_independent_with_a_warning():
    unused = tf.Variable(0.0, name="spare/v")
    fg = analyze_function(
        lambda x: {"l": tf.reduce_sum(x @ W)}, X, variable_scopes=SCOPES + [(unused, "spare")]
    )
    assert fg.cells["l"]["spare"] == "independent"
    assert any("spare/v" in w for w in fg.warnings)


def test_call_whose_body_is_missing_is_unknown_not_a_crash():
    @tf.function
    def inner(h):
        return h * 2.0

    cf = tf.function(lambda x: {"l": tf.reduce_sum(inner(x @ W))}).get_concrete_function(X)
    calls = [op for op in cf.graph.get_operations() if op.type.endswith("PartitionedCall")]
    assert calls, "the nested tf.function should stay a call op"
    cf.graph._functions.clear()  # a graph whose function library is unreadable
    fg = analyze_graph(cf.graph, {"l": cf.structured_outputs["l"]}, SCOPES)
    assert fg.cells["l"]["net"] == "blocked"
    assert {e.cause for e in fg.blocked_edges} == {"unknown_gradient"}


def test_cut_that_blocks_nothing_is_not_reported():
    def huber(x):
        err = x @ W
        small = tf.abs(err) < 1.0  # Less has no gradient, but err flows on via tf.where
        return {"l": tf.reduce_sum(tf.where(small, 0.5 * err * err, tf.abs(err) - 0.5))}

    fg = run(huber)
    assert fg.cells["l"]["net"] == "updates"
    assert fg.blocked_edges == []


def test_argmax_beside_a_differentiable_path_is_not_a_blocked_edge():
    def pick_max(x):
        h = x @ W
        return {"l": tf.reduce_sum(tf.gather(h, tf.argmax(h, axis=1), axis=1, batch_dims=1))}

    fg = run(pick_max)
    assert fg.cells["l"]["net"] == "updates"
    assert fg.blocked_edges == []
