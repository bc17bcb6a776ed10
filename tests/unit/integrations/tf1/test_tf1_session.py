"""Attaching to TF1 sessions: observation only, hooks, resume, failures."""

from __future__ import annotations

import warnings

import numpy as np
import tensorflow.compat.v1 as tf

from tb_gradscope.core.warn import GradscopeWarning
from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.integrations.tf1._ops import SNAPSHOT_COLLECTION
from tests.support.tf1_support import dqn_seed, multihead_feed, multihead_seed, read_records


def _train_multihead(logdir: str | None, steps: int = 6) -> list[np.ndarray]:
    m = multihead_seed()
    rng = np.random.default_rng(5)
    with m.graph.as_default():
        sess = tf.Session()
        if logdir is not None:
            gs = GraphRecorder(
                logdir,
                losses={"loss1": m.loss1, "loss2": m.loss2},
                train_ops={"loss1": m.train1, "loss2": m.train2},
                every_n_steps=1,
            )
            sess = gs.wrap(sess)
        sess.run(tf.global_variables_initializer())
        for _ in range(steps):
            feed = multihead_feed(m, rng)
            sess.run([m.train1, m.loss1], feed)
            sess.run(m.train2, feed)
        weights = sess.run(tf.trainable_variables())
        sess.close()
    return weights


def test_recording_every_step_does_not_change_training(tmp_path):
    plain = _train_multihead(None)
    recorded = _train_multihead(str(tmp_path))
    assert read_records(str(tmp_path))[("update_stats", "")]
    for a, b in zip(plain, recorded):
        np.testing.assert_array_equal(a, b)


def test_saver_and_initializers_never_see_gradscope_variables(tmp_path):
    m = multihead_seed()
    with m.graph.as_default():
        before = {v.name for v in tf.global_variables()}
        gs = GraphRecorder(
            str(tmp_path), losses={"loss1": m.loss1}, train_ops={"loss1": m.train1}, every_n_steps=1
        )
        assert {v.name for v in tf.global_variables()} == before
        snapshots = tf.get_collection(SNAPSHOT_COLLECTION)
        assert snapshots and all(v.name.startswith("tb_gradscope/") for v in snapshots)
        saver = tf.train.Saver()
        with gs.wrap(tf.Session()) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(m.train1, multihead_feed(m, np.random.default_rng(0)))
            assert sess.run(tf.report_uninitialized_variables()).size == 0
            path = saver.save(sess, str(tmp_path / "ckpt" / "model"))
        saved = {name for name, _ in tf.train.list_variables(path)}
        assert not any(name.startswith("tb_gradscope") for name in saved)
        assert "Agent/layer1/w1" in saved


def test_optimizer_slots_are_never_scopes(tmp_path):
    m = dqn_seed()
    with m.graph.as_default():
        everything = tf.global_variables()
        assert any(v.name.endswith("/RMSProp:0") for v in everything)
        gs = GraphRecorder(
            str(tmp_path),
            losses={"td": m.loss},
            train_ops={"td": m._train_op},
            variables=everything,
        )
    assert gs.layout.scopes == (
        "eval_net",
        "eval_net/e1",
        "eval_net/q",
        "target_net",
        "target_net/t1",
        "target_net/t2",
    )


def test_adam_state_is_never_a_scope(tmp_path):
    m = multihead_seed()
    with m.graph.as_default():
        everything = tf.global_variables()
        assert {"beta1_power:0", "Agent/layer1/w1/Adam_1:0"} <= {v.name for v in everything}
        gs = GraphRecorder(
            str(tmp_path),
            losses={"loss1": m.loss1},
            train_ops={"loss1": m.train1},
            variables=everything,
        )
    assert gs.layout.scopes == ("Agent", "Agent/layer1", "Agent/layer2_1", "Agent/layer2_2")


def test_loss_whose_placeholders_are_not_fed_is_skipped(tmp_path):
    m = multihead_seed()
    rng = np.random.default_rng(0)
    with m.graph.as_default():
        gs = GraphRecorder(
            str(tmp_path),
            losses={"loss1": m.loss1, "loss2": m.loss2},
            train_ops={"loss1": m.train1},
            every_n_steps=1,
        )
        with gs.wrap(tf.Session()) as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(3):
                feed = multihead_feed(m, rng)
                del feed[m.Y2]
                sess.run(m.train1, feed)
    assert not gs.disabled
    records = read_records(str(tmp_path))
    assert [r.step for r in records[("grad_stats", "loss1")]] == [0, 1, 2]
    assert ("grad_stats", "loss2") not in records


def test_failure_in_gradscope_ops_turns_recording_off_and_training_goes_on(tmp_path):
    def build(logdir):
        g = tf.Graph()
        with g.as_default():
            tf.set_random_seed(0)
            x = tf.placeholder(tf.float32, [None, 2])
            with tf.variable_scope("net"):
                w = tf.get_variable("w", [2, 1])
            loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
            train = tf.train.GradientDescentOptimizer(0.1).minimize(loss)
            # Finite forward, infinite gradient: only gradscope differentiates it.
            probe = tf.reduce_sum(tf.sqrt(tf.debugging.check_numerics(tf.abs(w) * 0.0, "probe")))
            sess = tf.Session()
            if logdir:
                gs = GraphRecorder(
                    logdir,
                    losses={"loss": loss, "probe": probe},
                    train_ops={"loss": train},
                    every_n_steps=1,
                )
                sess = gs.wrap(sess)
            sess.run(tf.global_variables_initializer())
            for _ in range(4):
                sess.run(train, {x: [[1.0, 2.0], [3.0, 4.0]]})
            return sess.run(w), sess

    expected, _ = build(None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        weights, sess = build(str(tmp_path))
    messages = [str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)]
    assert len(messages) == 1
    assert "stopped" in messages[0] and "tb_gradscope/grads/probe" in messages[0]
    assert sess._recorder.disabled
    np.testing.assert_array_equal(weights, expected)


def test_recorded_step_runs_the_forward_pass_once(tmp_path):
    g = tf.Graph()
    with g.as_default():
        x = tf.placeholder(tf.float32, [None, 3])
        forward_runs = tf.get_variable(
            "forward_runs", [], trainable=False, initializer=tf.zeros_initializer()
        )
        with tf.control_dependencies([forward_runs.assign_add(1.0)]):
            h = tf.identity(x)
        with tf.variable_scope("net"):
            w = tf.get_variable("w", [3, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(h, w)))
        train = tf.train.AdamOptimizer(0.1).minimize(loss)
        gs = GraphRecorder(
            str(tmp_path), losses={"loss": loss}, train_ops={"loss": train}, every_n_steps=1
        )
        with gs.wrap(tf.Session()) as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(5):
                sess.run(train, {x: np.ones([4, 3])})
            assert sess.run(forward_runs) == 5
    assert len(read_records(str(tmp_path))[("grad_stats", "loss")]) == 5
