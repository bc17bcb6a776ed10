"""GraphRecorder on the seed programs, read back through TensorBoard's data provider."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from tb_gradscope.integrations.tf1 import GraphRecorder, StartPoint
from tests.test_tf1_support import (
    ddpg_seed,
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
        # The seed's training code, with the three added lines marked.
        gs = GraphRecorder(str(tmp_path), losses={"loss1": m.loss1, "loss2": m.loss2},  # added
                           train_ops={"loss1": m.train1, "loss2": m.train2}, every_n_steps=5)
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
        sess.close()  # added

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
    updates = records[("update_stats", "")]
    assert [r.step for r in updates] == [0, 5]
    for rec in updates:
        for scope in ("Agent/layer1", "Agent/layer2_1", "Agent/layer2_2"):
            assert rec.value.row(scope)["update_norm"] > 0
            assert rec.value.row(scope)["weight_norm"] > 0
