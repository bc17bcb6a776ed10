"""tf_keras (Keras 2) layers in TF1 graph mode: `tf.compat.v1.layers` under
TF_USE_LEGACY_KERAS=1. The variable is read at TF import, so the program runs
in its own process; the parent reads its records through TensorBoard.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.support.tf1_support import read_records

PROGRAM = textwrap.dedent(
    """
    import sys
    import numpy as np
    import tensorflow.compat.v1 as tf
    from tb_gradscope.integrations.tf1 import GraphRecorder

    g = tf.Graph()
    with g.as_default():
        tf.set_random_seed(0)
        x = tf.placeholder(tf.float32, [None, 4])
        with tf.variable_scope("policy"):
            h = tf.layers.dense(x, 8, tf.nn.relu, name="hidden")
            h = tf.layers.batch_normalization(h, training=True, name="bn")
            out = tf.layers.dense(h, 1, name="out")
        with tf.variable_scope("frozen"):
            aux = tf.layers.dense(tf.stop_gradient(out), 1, name="probe")
        loss = tf.reduce_mean(tf.square(out - 1.0)) + tf.reduce_mean(tf.square(aux))
        with tf.control_dependencies(tf.get_collection(tf.GraphKeys.UPDATE_OPS)):
            train = tf.train.AdamOptimizer(0.01).minimize(
                loss, var_list=tf.trainable_variables("policy"))
        gs = GraphRecorder(sys.argv[1], losses={"fit": loss}, train_ops={"fit": train},
                           variables=tf.global_variables(), every_n_steps=1)
        with gs.wrap(tf.Session()) as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(3):
                sess.run(train, {x: np.random.default_rng(0).normal(size=(8, 4))})
    """
)


@pytest.mark.slow
def test_tf_keras_layers_in_graph_mode_are_scopes_and_slots_are_not(tmp_path):
    script = tmp_path / "program.py"
    script.write_text(PROGRAM)
    logdir = tmp_path / "logs"
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1")
    done = subprocess.run(
        [sys.executable, str(script), str(logdir)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, (
        "the tf_keras program failed (is tf-keras installed? pip install tf-keras):\n"
        + done.stderr[-3000:]
    )
    records = read_records(str(logdir))
    fit = records[("grad_stats", "fit")]
    table = fit[-1].value
    assert table.info.scopes == (
        "frozen",
        "frozen/probe",
        "policy",
        "policy/bn",
        "policy/hidden",
        "policy/out",
    )
    assert table.row("policy/hidden")["grad_vars"] == 2
    assert table.row("policy/bn")["grad_vars"] == 2  # gamma, beta; moving stats get none
    assert table.row("frozen/probe")["grad_vars"] == 2
    [flow] = records[("flowgraph", "")]
    from tb_gradscope.format import FlowGraph

    graph = FlowGraph.from_json(flow.value[0])
    assert graph.state("fit", "policy/hidden") == "updates"
    assert graph.state("fit", "frozen/probe") == "ignored"
    updates = records[("update_stats", "")][-1].value
    assert updates.row("policy/out")["update_norm"] > 0
    assert updates.row("frozen")["update_norm"] == 0
