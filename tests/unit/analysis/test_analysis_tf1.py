"""TF1 graphs beyond the seeds: ref variables, v1 control flow, tf.gradients start points."""

from __future__ import annotations

import contextlib

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

from tb_gradscope.analysis import analyze_graph
from tb_gradscope.scopes import leaf_scope
from tests.support.analysis_models import StartPoint

v1 = tf.compat.v1


@contextlib.contextmanager
def v1_control_flow():
    """Builds tf.while_loop / tf.cond as Enter/Switch/Merge ops, as TF1 programs did."""
    previous = control_flow_util.ENABLE_CONTROL_FLOW_V2
    control_flow_util.ENABLE_CONTROL_FLOW_V2 = False
    try:
        yield
    finally:
        control_flow_util.ENABLE_CONTROL_FLOW_V2 = previous


def scoped(graph):
    with graph.as_default():
        return [(v, leaf_scope(v.name)) for v in v1.trainable_variables()]


def test_ref_variables_and_apply_ops_are_matched():
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 3], "x")
        with v1.variable_scope("actor", use_resource=False):
            wa = v1.get_variable("w", [3, 1])
        with v1.variable_scope("critic", use_resource=False):
            wc = v1.get_variable("w", [3, 1])
        loss = tf.reduce_mean(tf.matmul(x, wa) * tf.stop_gradient(tf.matmul(x, wc)))
        scopes = scoped(graph)
        train = v1.train.GradientDescentOptimizer(0.1).minimize(loss, var_list=[wa])
    assert wa.op.type == "VariableV2"
    fg = analyze_graph(graph, {"actor": loss}, scopes, train_ops={"actor": train})
    assert fg.cells["actor"] == {"actor": "updates", "critic": "blocked"}
    assert fg.applied == ["actor"]


def test_v1_while_loop_and_cond_are_followed():
    graph = tf.Graph()
    with graph.as_default(), v1_control_flow():
        x = v1.placeholder(tf.float32, [2, 2], "x")
        with v1.variable_scope("rnn"):
            w = v1.get_variable("w", [2, 2])
        with v1.variable_scope("gate"):
            g = v1.get_variable("g", [2, 2])
        _, h = tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(h @ w)), [0, x])
        gated = tf.cond(tf.reduce_sum(x) > 0, lambda: h * tf.stop_gradient(g), lambda: h)
        loss = tf.reduce_sum(gated)
    assert {"Enter", "Switch", "Merge", "NextIteration"} <= {
        op.type for op in graph.get_operations()
    }
    fg = analyze_graph(graph, {"loss": loss}, scoped(graph))
    assert fg.cells["loss"]["rnn"] == "updates"
    assert fg.cells["loss"]["gate"] == "blocked"
    assert {e.op_type for e in fg.blocked_edges} == {"StopGradient"}


def test_tf1_start_point_uses_only_the_tensor_it_starts_from():
    graph = tf.Graph()
    with graph.as_default():
        s = v1.placeholder(tf.float32, [None, 4], "s")
        with v1.variable_scope("network"):
            q = tf.matmul(s, v1.get_variable("w", [4, 2]))
        with v1.variable_scope("head"):
            total = tf.reduce_sum(q * v1.get_variable("scale", [2]))
        targets = v1.placeholder(tf.float32, [None, 2], "targets")
    fg = analyze_graph(
        graph,
        {"q_update": StartPoint(q, targets), "total": total},
        scoped(graph),
    )
    assert fg.cells["q_update"] == {"head": "independent", "network": "updates"}
    assert fg.cells["total"] == {"head": "updates", "network": "updates"}
