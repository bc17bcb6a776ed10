"""GraphRecorder on the seed programs, read back through TensorBoard's data provider."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from tb_gradscope.format import FlowGraph
from tb_gradscope.integrations.tf1 import GraphRecorder, StartPoint
from tb_gradscope.pairs import pair_ema, pair_prefixes
from tests.support.tf1_support import (
    ddpg_seed,
    dqn3_seed,
    dqn_feed,
    dqn_seed,
    multihead_feed,
    multihead_seed,
    read_records,
)


def _l2(arrays) -> float:
    return float(np.sqrt(sum(np.sum(np.square(a, dtype=np.float64)) for a in arrays)))


def test_seed01_multihead_gives_full_matrix(tmp_path):
    m = multihead_seed()
    rng = np.random.default_rng(0)
    with m.graph.as_default():
        check = {
            "Agent/layer1": tf.gradients(m.loss1, m.layer1_params),
            "Agent/layer2_1": tf.gradients(m.loss1, m.layer21_params),
        }
        # The seed's training code; the two added statements are marked.
        gs = GraphRecorder(
            str(tmp_path),
            losses={"loss1": m.loss1, "loss2": m.loss2},  # added
            train_ops={"loss1": m.train1, "loss2": m.train2},
            every_n_steps=5,
        )
        sess = tf.Session()
        sess = gs.wrap(sess)  # added
        sess.run(tf.global_variables_initializer())
        expected_l2 = {}
        for step in range(10):
            feed = multihead_feed(m, rng)
            _, grads = sess.run([m.train1, check], feed)
            if step == 0:
                expected_l2 = {scope: _l2(g) for scope, g in grads.items()}
            sess.run(m.train2, feed)
        # No close() needed: each recorded step is flushed when its window closes.

    records = read_records(str(tmp_path))
    loss1 = records[("grad_stats", "loss1")]
    loss2 = records[("grad_stats", "loss2")]
    assert [r.step for r in loss1] == [0, 5] and [r.step for r in loss2] == [0, 5]
    for rec in loss1:
        assert rec.value.row("Agent/layer1")["grad_vars"] == 2
        assert rec.value.row("Agent/layer2_1")["grad_vars"] == 2
        assert rec.value.row("Agent/layer2_2")["grad_vars"] == 0
        assert rec.value.row("Agent")["grad_vars"] == 4
        assert rec.value.row("Agent/layer2_1")["l2"] > 0
    for rec in loss2:
        assert rec.value.row("Agent/layer1")["grad_vars"] == 2
        assert rec.value.row("Agent/layer2_1")["grad_vars"] == 0
        assert rec.value.row("Agent/layer2_2")["grad_vars"] == 2
    for scope, l2 in expected_l2.items():
        assert loss1[0].value.row(scope)["l2"] == pytest.approx(l2, rel=1e-5)
    [flow] = records[("flowgraph", "")]
    graph = FlowGraph.from_json(flow.value[0])
    assert flow.step == 0 and graph.source == "tf1"
    layers = ("Agent/layer1", "Agent/layer2_1", "Agent/layer2_2")
    assert [graph.state("loss1", s) for s in layers] == ["updates", "updates", "independent"]
    assert [graph.state("loss2", s) for s in layers] == ["updates", "independent", "updates"]
    updates = records[("update_stats", "")]
    assert [r.step for r in updates] == [0, 5]
    for rec in updates:
        for scope in ("Agent/layer1", "Agent/layer2_1", "Agent/layer2_2"):
            assert rec.value.row(scope)["update_norm"] > 0
            assert rec.value.row(scope)["weight_norm"] > 0


def _run_dqn(logdir: str, learn_steps: int, replace_every: int, every_n_steps: int, pairs=None):
    """Seed 01's DQN learn loop (target replaced every `replace_every` learn steps)."""
    m = dqn_seed()
    rng = np.random.default_rng(1)
    with m.graph.as_default():
        gs = GraphRecorder(
            logdir,
            losses={"td": m.loss},
            train_ops={"td": m._train_op},
            every_n_steps=every_n_steps,
            pairs=pairs,
        )
        sess = gs.wrap(tf.Session())
        sess.run(tf.global_variables_initializer())
        for learn_step_counter in range(learn_steps):
            if learn_step_counter % replace_every == 0:
                sess.run(m.target_replace_op)
            feed = dqn_feed(m, rng)
            sess.run(m.q_eval, {m.s: feed[m.s]})  # choose_action: not a step
            sess.run([m._train_op, m.loss], feed_dict=feed)
        sess.close()
    return m, gs


def test_dqn_stop_gradient_blocks_target_net(tmp_path):
    m, gs = _run_dqn(str(tmp_path), learn_steps=6, replace_every=3, every_n_steps=2)
    records = read_records(str(tmp_path))
    td = records[("grad_stats", "td")]
    assert [r.step for r in td] == [0, 2, 4]
    for rec in td:
        assert rec.value.row("target_net")["grad_vars"] == 0
        assert rec.value.row("eval_net")["grad_vars"] == 4
        assert rec.value.row("eval_net/e1")["l2"] > 0
    [flow] = records[("flowgraph", "")]
    graph = FlowGraph.from_json(flow.value[0])
    assert graph.state("td", "target_net/t1") == "blocked"
    assert graph.state("td", "eval_net/e1") == "updates"
    [edge] = {
        (e.op_type, e.source.file, e.source.line) for e in graph.blocked_edges if e.loss == "td"
    }
    assert edge[0] == "StopGradient"
    assert edge[1].endswith("tests/support/tf1_support.py")
    source_line = open("tests/support/tf1_support.py").read().splitlines()[edge[2] - 1]
    assert "tf.stop_gradient(q_target)" in source_line


def test_dqn_applied_updates_follow_the_train_op(tmp_path):
    _run_dqn(
        str(tmp_path),
        learn_steps=4,
        replace_every=100,
        every_n_steps=1,
        pairs={"target_net": "eval_net"},
    )
    records = read_records(str(tmp_path))
    updates = records[("update_stats", "")]
    assert [r.step for r in updates] == [0, 1, 2, 3]
    for rec in updates:
        assert rec.value.row("eval_net")["update_norm"] > 0
        assert rec.value.row("target_net")["update_norm"] == 0
        assert rec.value.row("target_net")["weight_norm"] > 0
    # Replaced once, before step 0: the target then falls behind step by step.
    drift = [r.value.row("target_net")["drift"] for r in records[("drift", "target_net<-eval_net")]]
    assert drift[0] == 0 and drift[1] > 0 and drift[3] > drift[1]


def test_ddpg_actor_start_point_attributes_to_actor_scopes(tmp_path):
    m = ddpg_seed()
    rng = np.random.default_rng(2)
    with m.graph.as_default():
        gs = GraphRecorder(
            str(tmp_path),
            losses={"critic": m.td_loss, "actor": StartPoint(m.a, output_gradients=m.a_grads)},
            train_ops={"critic": m.train_critic, "actor": m.train_actor},
            every_n_steps=1,
        )
        sess = gs.wrap(tf.Session())
        sess.run(tf.global_variables_initializer())
        first_policy_grads = None
        for _ in range(3):
            feed = {m.S: rng.normal(size=(8, 3)), m.R: rng.normal(size=(8, 1))}
            _, policy_grads = sess.run([m.train_actor, m.policy_grads], feed)
            sess.run(m.train_critic, feed)
            first_policy_grads = first_policy_grads or policy_grads
        sess.close()
    records = read_records(str(tmp_path))
    actor = records[("grad_stats", "actor")]
    assert [r.step for r in actor] == [0, 1, 2]
    for rec in actor:
        assert rec.value.row("Actor/eval_net/l1")["grad_vars"] == 2
        assert rec.value.row("Actor/eval_net/a")["l2"] > 0
        assert rec.value.row("Critic")["grad_vars"] == 0
    assert actor[0].value.row("Actor")["l2"] == pytest.approx(_l2(first_policy_grads), rel=1e-5)
    critic = records[("grad_stats", "critic")]
    assert all(r.value.row("Critic/eval_net/q")["grad_vars"] == 2 for r in critic)
    [flow] = records[("flowgraph", "")]
    graph = FlowGraph.from_json(flow.value[0])
    assert graph.state("actor", "Actor/eval_net/l1") == "updates"
    assert graph.state("actor", "Critic/eval_net") == "independent"
    assert graph.state("critic", "Actor/eval_net") == "ignored"


def test_dqn_drift_returns_to_zero_at_every_hard_replacement(tmp_path):
    m = dqn_seed()
    rng = np.random.default_rng(3)
    with m.graph.as_default():
        pair = pair_prefixes(tf.trainable_variables(), "target_net", "eval_net", every=3)
        gs = GraphRecorder(
            str(tmp_path),
            losses={"td": m.loss},
            train_ops={"td": m._train_op},
            every_n_steps=2,
            pairs=[pair],
        )
        with gs.wrap(tf.Session()) as sess:
            sess.run(tf.global_variables_initializer())
            for learn_step_counter in range(11):
                if learn_step_counter % 3 == 0:
                    sess.run(m.target_replace_op)
                sess.run([m._train_op, m.loss], feed_dict=dqn_feed(m, rng))
    [(key, series)] = [(k, v) for k, v in read_records(str(tmp_path)).items() if k[0] == "drift"]
    assert key == ("drift", "target_net<-eval_net")
    # every_n_steps only: the declared copy period says what to expect, so the
    # copies are seen as such at the records that fall on copy steps (0, 6).
    assert [r.step for r in series] == [0, 2, 4, 6, 8, 10]
    for rec in series:
        drift = rec.value.row("target_net")["drift"]
        if rec.step % 3 == 0:
            assert drift == 0
        else:
            assert drift > 0
    assert series[0].value.info.attrs["every"] == 3
    assert np.isnan(series[0].value.row("target_net")["tau"])  # no snapshot before step 0
    (copy,) = [r for r in series if r.step == 6]  # snapshot at s - 1 exists
    assert copy.value.row("target_net/t1")["tau"] == pytest.approx(1.0, abs=1e-6)  # tau 1: a copy


def test_dqn3_gradient_start_point_attributes_to_network_only(tmp_path):
    m = dqn3_seed()
    rng = np.random.default_rng(4)
    with m.graph.as_default():
        gs = GraphRecorder(
            str(tmp_path),
            losses={"q": StartPoint(m.q_all, -m.targets)},
            train_ops={"q": m.train},
            every_n_steps=1,
        )
        with gs.wrap(tf.Session()) as sess:
            sess.run(tf.global_variables_initializer())
            feed = {
                m.s: rng.normal(size=(8, 4)),
                m.s2: rng.normal(size=(8, 4)),
                m.a: rng.integers(0, 3, size=8),
                m.r: rng.normal(size=8),
            }
            _, grads = sess.run([m.train, m.grads], feed)
    records = read_records(str(tmp_path))
    [rec] = records[("grad_stats", "q")]
    assert rec.value.row("network")["l2"] == pytest.approx(_l2(grads), rel=1e-5)
    assert rec.value.row("network/out")["grad_vars"] == 2
    assert rec.value.row("target_network")["grad_vars"] == 0
    graph = FlowGraph.from_json(records[("flowgraph", "")][0].value[0])
    assert graph.losses[0].kind == "start_point"
    assert graph.state("q", "network/l1") == "updates"
    assert graph.state("q", "target_network/l1") == "independent"


def test_ema_shadows_drift_with_the_declared_tau(tmp_path):
    """Seed 03 in TF1: the target is tf.train.ExponentialMovingAverage of online."""
    g = tf.Graph()
    rng = np.random.default_rng(5)
    with g.as_default():
        tf.set_random_seed(5)
        x = tf.placeholder(tf.float32, [None, 3])
        with tf.variable_scope("online"):
            with tf.variable_scope("l1"):
                w = tf.get_variable("w", [3, 4])
            with tf.variable_scope("l2"):
                v = tf.get_variable("v", [4, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.tanh(tf.matmul(x, w)), v) - 1.0))
        online = tf.trainable_variables("online")
        opt_op = tf.train.AdamOptimizer(0.05).minimize(loss)
        ema = tf.train.ExponentialMovingAverage(decay=0.75)
        with tf.control_dependencies([opt_op]):
            train = ema.apply(online)
        gs = GraphRecorder(
            str(tmp_path),
            losses={"fit": loss},
            train_ops={"fit": train},
            every_n_steps=2,
            pairs=[pair_ema(ema, online)],
        )
        with gs.wrap(tf.Session()) as sess:
            sess.run(tf.global_variables_initializer())
            for _ in range(7):
                sess.run(train, {x: rng.normal(size=(8, 3))})
    [series] = [v for k, v in read_records(str(tmp_path)).items() if k[0] == "drift"]
    assert [r.step for r in series] == [0, 2, 4, 6]
    assert series[0].value.row(series[0].value.info.scopes[0])["drift"] == 0  # shadows start equal
    for rec in series[1:]:
        root = rec.value.info.scopes[0]
        assert rec.value.row(root)["drift"] > 0
        assert rec.value.row(root)["tau"] == pytest.approx(0.25, rel=1e-3)
    assert series[0].value.info.attrs["tau"] == pytest.approx(0.25)


def test_seed01_multihead_records_the_gradient_conflict_of_its_two_losses(tmp_path):
    """Multi-task TF1 code (two losses, two train ops on one feed): CONFLICT
    `loss1|loss2` at every recorded step, one row per scope both losses reach
    (the shared `Agent/layer1`), the cosine of their gradients at the state of
    the call that records the first of them."""
    m = multihead_seed()
    rng = np.random.default_rng(1)
    with m.graph.as_default():
        shared = tf.gradients(m.loss1, m.layer1_params), tf.gradients(m.loss2, m.layer1_params)
        gs = GraphRecorder(
            str(tmp_path),
            losses={"loss1": m.loss1, "loss2": m.loss2},
            train_ops={"loss1": m.train1, "loss2": m.train2},
            every_n_steps=2,
        )
        raw = tf.Session()
        sess = gs.wrap(raw)
        sess.run(tf.global_variables_initializer())
        want = {}
        for step in range(4):
            feed = multihead_feed(m, rng)
            a, b = raw.run(shared, feed)
            fa = np.concatenate([g.ravel() for g in a]).astype(np.float64)
            fb = np.concatenate([g.ravel() for g in b]).astype(np.float64)
            want[step] = fa @ fb / np.sqrt((fa @ fa) * (fb @ fb))
            sess.run(m.train1, feed)
            sess.run(m.train2, feed)
    records = read_records(str(tmp_path))
    series = records[("conflict", "loss1|loss2")]
    assert [r.step for r in series] == [0, 2]
    for rec in series:
        assert rec.value.info.scopes == ("Agent", "Agent/layer1")
        assert rec.value.info.attrs["losses"] == ["loss1", "loss2"]
        assert rec.value.row("Agent/layer1")["cosine"] == pytest.approx(want[rec.step], abs=1e-5)
