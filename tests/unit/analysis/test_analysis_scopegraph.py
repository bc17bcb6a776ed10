"""The scope-level dataflow graph through nested loops and function calls."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tb_gradscope.analysis import analyze_function

CELL = tf.Variable(np.eye(3, dtype="float32"), name="rnn/cell/kernel")
HEAD = tf.Variable(np.ones((3, 1), "float32"), name="head/kernel")
SCOPES = [(CELL, "rnn/cell"), (HEAD, "head")]


def test_value_carried_out_of_nested_loops_reaches_the_next_scope():
    def step(x):
        def inner(j, h):
            return j + 1, tf.tanh(h @ CELL)

        def outer(i, h):
            return i + 1, tf.while_loop(lambda j, h: j < 2, inner, [0, h])[1] * 0.5

        _, h = tf.while_loop(lambda i, h: i < 2, outer, [0, x])
        return {"l": tf.reduce_sum(h @ HEAD)}

    fg = analyze_function(step, tf.TensorSpec([2, 3]), variable_scopes=SCOPES)
    edges = {(e.src, e.dst) for e in fg.edges}
    assert ("rnn/cell", "head") in edges
    assert ("head", "loss:l") in edges
    assert fg.cells["l"] == {"head": "updates", "rnn": "updates", "rnn/cell": "updates"}


def test_nested_tf_function_is_inlined_into_the_scope_graph():
    @tf.function
    def encoder(x):
        return tf.nn.relu(x @ CELL)

    fg = analyze_function(
        lambda x: {"l": tf.reduce_sum(encoder(x) @ HEAD)},
        tf.TensorSpec([2, 3]),
        variable_scopes=SCOPES,
    )
    edges = {(e.src, e.dst): e.tensors for e in fg.edges}
    assert edges[("input:x", "rnn/cell")] == 1
    assert edges[("rnn/cell", "head")] == 1


def test_stop_gradient_on_a_weight_points_from_its_scope_to_where_it_is_used():
    fg = analyze_function(
        lambda x: {"l": tf.reduce_sum(x @ tf.stop_gradient(CELL) @ HEAD)},
        tf.TensorSpec([2, 3]),
        variable_scopes=SCOPES,
    )
    [edge] = fg.blocked_edges
    assert (edge.producer_scope, edge.consumer_scope) == ("rnn/cell", "head")
    assert fg.cells["l"]["rnn/cell"] == "blocked"


def test_handles_of_variables_outside_the_model_are_not_inputs():
    other = tf.Variable(2.0, name="not_in_model")
    fg = analyze_function(
        lambda x: {"l": tf.reduce_sum(x @ CELL) * other},
        tf.TensorSpec([2, 3]),
        variable_scopes=SCOPES,
    )
    assert [n.id for n in fg.nodes if n.kind == "input"] == ["input:x"]
