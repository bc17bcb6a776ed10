"""TF1 target/online pairs with `trainable=False` targets (DDPG, SAC style)."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from tb_gradscope import format as fmt
from tb_gradscope.integrations.tf1 import GraphRecorder, pair_scopes
from tb_gradscope.read.anomalies import NEVER_SYNCED
from tests.support.corpus.shapes_tf1 import build_ddpg
from tests.support.tf1_support import read_records
from tests.unit.commands.test_doctor import _findings


@pytest.fixture(scope="module")
def ddpg():
    return build_ddpg(leaky=False)


def _train(m, logdir: str, steps: int = 3, synced: bool = True, **kwargs) -> GraphRecorder:
    """Trains the DDPG, its targets hard-copied before step 0 if `synced`."""
    rng = np.random.default_rng(0)
    with m.graph.as_default():
        gs = GraphRecorder(
            logdir,
            losses={"td_error": m.td_error, "a_loss": m.a_loss},
            train_ops={"td_error": m.ctrain, "a_loss": m.atrain},
            every_n_steps=1,
            **kwargs,
        )
        with gs.wrap(tf.Session()) as sess:
            sess.run(m.init)
            if synced:
                sess.run(m.hard_replace)
            for _ in range(steps):
                s = rng.normal(size=(8, 3))
                sess.run(m.atrain, {m.S: s})
                sess.run(
                    m.ctrain,
                    {
                        m.S: s,
                        m.a: rng.uniform(-1, 1, (8, 2)),
                        m.R: rng.normal(size=(8, 1)),
                        m.S_: rng.normal(size=(8, 3)),
                    },
                )
                sess.run(m.soft_replace)
    return gs


def test_trainable_false_target_pair_by_scope_names_records_drift(ddpg, tmp_path):
    _train(
        ddpg, str(tmp_path), pairs={"Actor/target": "Actor/eval", "Critic/target": "Critic/eval"}
    )
    records = read_records(str(tmp_path))
    drift = records[("drift", "Actor/target<-Actor/eval")]
    assert [r.step for r in drift] == [0, 1, 2]
    assert drift[0].value.row("Actor/target")["drift"] == 0  # hard-copied before step 0
    assert drift[2].value.row("Actor/target")["drift"] > 0
    assert drift[2].value.row("Actor/target")["tau"] == pytest.approx(0.1, rel=1e-3)
    assert ("drift", "Critic/target<-Critic/eval") in records


def test_auto_pairs_find_the_trainable_false_targets_by_scope_name(ddpg, tmp_path):
    """pairs="auto": the same pairs and drift as when declared, so doctor
    sees the targets of a run that declared none."""
    gs = _train(ddpg, str(tmp_path), pairs="auto")
    assert "Actor/target" in gs.layout.scopes and "Critic/target" in gs.layout.scopes
    records = read_records(str(tmp_path))
    for pair in ("Actor/target<-Actor/eval", "Critic/target<-Critic/eval"):
        drift = records[("drift", pair)]
        assert [r.step for r in drift] == [0, 1, 2]
    actor = records[("drift", "Actor/target<-Actor/eval")]
    assert actor[0].value.row("Actor/target")["drift"] == 0  # hard-copied before step 0
    assert actor[2].value.row("Actor/target")["tau"] == pytest.approx(0.1, rel=1e-3)


def test_paired_non_trainable_targets_appear_in_the_matrix(ddpg, tmp_path):
    with ddpg.graph.as_default():
        pair = pair_scopes("Critic/target", "Critic/eval")
    gs = _train(ddpg, str(tmp_path), steps=1, pairs=[pair])
    assert "Critic/target" in gs.layout.scopes
    assert "Actor/target" not in gs.layout.scopes  # not paired, not trainable: not asked for
    records = read_records(str(tmp_path))
    [td] = records[("grad_stats", "td_error")]
    assert td.value.row("Critic/target/q")["grad_vars"] == 2  # reached through q_
    [flow] = records[("flowgraph", "")]
    graph = fmt.FlowGraph.from_json(flow.value[0])
    assert graph.state("td_error", "Critic/target") == fmt.IGNORED  # trainable=False
    assert graph.state("a_loss", "Critic/target") == fmt.INDEPENDENT


def test_explicit_variables_are_the_matrix_as_given(ddpg, tmp_path):
    with ddpg.graph.as_default():
        gs = GraphRecorder(
            str(tmp_path),
            losses={"td_error": ddpg.td_error},
            train_ops={"td_error": ddpg.ctrain},
            variables=tf.trainable_variables(),
            pairs={"Critic/target": "Critic/eval"},
        )
    assert not any(s.startswith("Critic/target") for s in gs.layout.scopes)


def test_pair_with_trainable_variables_says_the_target_is_not_trainable(ddpg):
    with ddpg.graph.as_default():
        with pytest.raises(ValueError) as refused:
            pair_scopes("Actor/target", "Actor/eval", variables=tf.trainable_variables())
    text = str(refused.value)
    assert "pair target scope 'Actor/target'" in text
    assert (
        "4 variable(s) under 'Actor/target' exist but are not trainable (trainable=False)" in text
    )
    assert "leave variables out" in text and "global_variables()" in text


def test_pair_scope_without_variables_lists_the_graph_scopes(ddpg):
    with ddpg.graph.as_default():
        with pytest.raises(
            ValueError,
            match=r"pair online scope 'Actor/evl': the graph has no "
            r"variable under it \(top-level scopes: Actor, Critic\)",
        ):
            GraphRecorder(
                "unused",
                losses={"a_loss": ddpg.a_loss},
                train_ops={"a_loss": ddpg.atrain},
                pairs={"Actor/target": "Actor/evl"},
            )


def test_pair_scopes_outside_the_graph_says_where_to_call_it(ddpg):
    with pytest.raises(
        ValueError,
        match=r"no variables at all; call pair_scopes inside "
        r"`with graph.as_default\(\):`",
    ):
        pair_scopes("Actor/target", "Actor/eval", graph=tf.Graph())


def test_pair_scopes_declares_tau_and_every(ddpg):
    with ddpg.graph.as_default():
        soft = pair_scopes("Actor/target", "Actor/eval", tau=0.01)
        hard = pair_scopes("Critic/target", "Critic/eval", every=100)
    assert soft.tau == 0.01 and soft.every is None and len(soft.target) == 4
    assert soft.target_names[0].startswith("Actor/target/") and not any(
        "Adam" in n for n in soft.online_names
    )
    assert hard.every == 100 and hard.name == "Critic/target<-Critic/eval"


def test_doctor_advises_an_assign_op_for_a_tf1_target_never_synced(ddpg, tmp_path):
    """The fix for a Session graph's target is an assign op it runs, not
    Keras's set_weights (issue 35, item 10): doctor reads the framework from
    the FlowGraph the GraphRecorder wrote."""
    _train(
        ddpg,
        str(tmp_path / "run"),
        steps=4,
        synced=False,
        pairs={"Actor/target": "Actor/eval", "Critic/target": "Critic/eval"},
    )
    code, found, err = _findings(tmp_path, None)
    never = [f for f in found if f["evidence"].get("anomaly") == NEVER_SYNCED]
    assert code == 1 and {f["pair"] for f in never} == {
        "Actor/target<-Actor/eval",
        "Critic/target<-Critic/eval",
    }, err
    for finding in never:
        assert "assign" in finding["fix"] and "sess.run" in finding["fix"]
        assert "set_weights" not in finding["fix"] + finding["what"]


def _tf1_mean_teacher(logdir: str, rules=()):
    """A TF1 mean teacher: the student trained on labels and on the teacher's
    logits behind tf.stop_gradient, the teacher made of the student's
    tf.train.ExponentialMovingAverage shadows."""
    import numpy as np
    import tensorflow.compat.v1 as tf1

    from tb_gradscope.integrations.tf1 import GraphRecorder
    from tb_gradscope.pairs import pair_ema

    graph = tf1.Graph()
    with graph.as_default():
        tf1.set_random_seed(7)
        x = tf1.placeholder(tf1.float32, [None, 3])
        y = tf1.placeholder(tf1.float32, [None, 1])
        with tf1.variable_scope("student"):
            w1 = tf1.get_variable("l1/w", [3, 4])
            w2 = tf1.get_variable("l2/w", [4, 1])
        student = tf1.trainable_variables("student")
        ema = tf1.train.ExponentialMovingAverage(decay=0.9)
        apply_ema = ema.apply(student)

        def logits(a, b):
            return tf1.matmul(tf1.tanh(tf1.matmul(x, a)), b)

        teacher = logits(ema.average(w1), ema.average(w2))
        fit = tf1.reduce_mean(tf1.square(logits(w1, w2) - y))
        cons = tf1.reduce_mean(tf1.square(logits(w1, w2) - tf1.stop_gradient(teacher)))
        opt = tf1.train.AdamOptimizer(0.05).minimize(fit + cons, var_list=student)
        with tf1.control_dependencies([opt]):
            train = tf1.group(apply_ema)
        gs = GraphRecorder(
            logdir,
            losses={"fit": fit, "cons": cons},
            train_ops={"fit": train, "cons": train},
            every_n_steps=1,
            pairs=[pair_ema(ema, student)],
            rules=list(rules),
        )
        rng = np.random.default_rng(0)
        with gs.wrap(tf1.Session()) as sess:
            sess.run(tf1.global_variables_initializer())
            for _ in range(3):
                sess.run(train, {x: rng.normal(size=(8, 3)), y: rng.normal(size=(8, 1))})


def test_ema_shadows_are_matrix_scopes_and_the_teachers_cut_a_blocked_edge(tmp_path):
    """tf.train.ExponentialMovingAverage shadows have rows of their own (`ema/...`,
    the pair's names), so `never(cons, ema/*)` can be stated and holds, and the
    stop_gradient on the teacher's logits is a blocked edge of `cons`."""
    from tb_gradscope.format import FlowGraph

    _tf1_mean_teacher(str(tmp_path), rules=["never(cons, ema/*)"])
    records = read_records(str(tmp_path))
    cons = records[("grad_stats", "cons")][0].value
    assert "ema/student" in cons.info.scopes, cons.info.scopes
    assert cons.row("ema/student")["grad_vars"] == 0
    assert cons.row("student")["grad_vars"] == 2
    graph = FlowGraph.from_json(records[("flowgraph", "")][0].value[0])
    assert graph.state("cons", "ema/student/l1") == "blocked"
    edges = [e for e in graph.blocked_edges if e.loss == "cons"]
    assert any(e.op_type == "StopGradient" and e.producer_scope.startswith("ema") for e in edges), [
        (e.op_type, e.producer_scope) for e in edges
    ]
    assert ("events", "violations") not in records or not any(
        r.value for r in records[("events", "violations")]
    )


def test_auto_pairs_find_a_ppo_old_policy_snapshot(tmp_path):
    """pairs="auto" on a TF1 PPO: `oldpi` (trainable=False, assigned from `pi`
    before each update) is paired with `pi` and its drift recorded."""
    from tests.unit.integrations.tf1.test_tf1_blocks import build_ppo

    m = build_ppo()
    with m["graph"].as_default():
        gs = GraphRecorder(
            str(tmp_path),
            losses={"aloss": m["aloss"]},
            train_ops={"aloss": m["atrain"]},
            every_n_steps=1,
            pairs="auto",
        )
        feed = {
            m["S"]: np.ones((4, 3)),
            m["A"]: np.ones((4, 2)),
            m["ADV"]: np.ones((4, 1)),
        }
        with gs.wrap(tf.Session()) as sess:
            sess.run(m["init"])
            for _ in range(2):
                sess.run(m["copy"])
                sess.run(m["atrain"], feed)
    drift = [name for kind, name in read_records(str(tmp_path)) if kind == "drift"]
    assert drift == ["oldpi<-pi"]
