"""GraphRecorder on a TF1 graph built with TF2 behaviour left on: resource variables."""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from tb_gradscope.integrations.tf1 import GraphRecorder
from tests.support.tf1_support import read_records


def test_resource_graph_with_a_classic_global_step_variable_records(tmp_path):
    """`tf.Variable(0, trainable=False, name="global_step")` in a `tf.Graph()` without
    `disable_v2_behavior` is a resource variable; TF's own `get_global_step` then raises
    `TypeError: Existing "global_step" does not have integer type`. The recorder finds the
    step without it and starts counting from its value."""
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 2])
        w = tf.Variable(np.ones((2, 1), np.float32), name="net/w")
        global_step = tf.Variable(3, trainable=False, name="global_step")
        loss = tf.reduce_mean(tf.matmul(x, w) ** 2)
        train = v1.train.GradientDescentOptimizer(0.1).minimize(
            loss, var_list=[w], global_step=global_step
        )
        rec = GraphRecorder(
            str(tmp_path), losses={"loss": loss}, train_ops={"loss": train}, every_n_steps=2
        )
        with rec.wrap(v1.Session(graph=graph)) as sess:
            sess.run(v1.global_variables_initializer())
            for _ in range(4):
                sess.run(train, {x: np.ones((4, 2), np.float32)})
        rec.close()
    records = read_records(str(tmp_path))
    assert [r.step for r in records[("grad_stats", "loss")]] == [4, 6]
    assert records[("grad_stats", "loss")][0].value.row("net")["grad_vars"] == 1
