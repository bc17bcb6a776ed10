"""GraphRecorder.hook() under tf.compat.v1.train.MonitoredTrainingSession."""

from __future__ import annotations

import numpy as np
import tensorflow.compat.v1 as tf

from tb_gradscope.integrations.tf1 import GraphRecorder
from tests.support.tf1_support import read_records


def _train(logdir: str, checkpoint_dir: str, steps: int) -> int:
    """A global-step model trained under MonitoredTrainingSession; returns the final step."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(0)
        global_step = tf.train.get_or_create_global_step()
        x = tf.placeholder(tf.float32, [None, 3], "x")
        with tf.variable_scope("online"):
            with tf.variable_scope("l1"):
                w = tf.get_variable("w", [3, 4])
            with tf.variable_scope("l2"):
                v = tf.get_variable("v", [4, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.nn.relu(tf.matmul(x, w)), v) - 1.0))
        train = tf.train.AdamOptimizer(0.01).minimize(loss, global_step=global_step)
        gs = GraphRecorder(logdir, losses={"fit": loss}, train_ops={"fit": train}, every_n_steps=2)
        rng = np.random.default_rng(0)
        with tf.train.MonitoredTrainingSession(
            checkpoint_dir=checkpoint_dir,
            hooks=[gs.hook()],
            save_summaries_steps=None,
            save_summaries_secs=None,
            log_step_count_steps=None,
        ) as sess:
            for _ in range(steps):
                sess.run(train, {x: rng.normal(size=(8, 3))})
            return int(sess.run(global_step))


def test_hook_records_under_monitored_training_session_and_resumes_steps(tmp_path):
    logdir, ckpt = str(tmp_path / "logs"), str(tmp_path / "ckpt")
    assert _train(logdir, ckpt, steps=5) == 5
    assert _train(logdir, ckpt, steps=4) == 9  # restored from the checkpoint
    records = read_records(logdir)
    fit = records[("grad_stats", "fit")]
    assert [r.step for r in fit] == [0, 2, 4, 6, 8]
    assert all(r.value.row("online/l1")["grad_vars"] == 1 for r in fit)
    assert all(r.value.row("online")["l2"] > 0 for r in fit)
    updates = records[("update_stats", "")]
    assert [r.step for r in updates] == [0, 2, 4, 6, 8]
    assert all(r.value.row("online/l2")["update_norm"] > 0 for r in updates)
    assert "global_step" not in fit[0].value.info.scopes
    # Each session's recorder writes its graph's FlowGraph at its first train call
    # (the resumed one at global step 5), where rule violations it shows are raised.
    assert [r.step for r in records[("flowgraph", "")]] == [0, 5]
