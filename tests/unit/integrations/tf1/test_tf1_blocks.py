"""Train ops run in blocks (TF1 PPO): one record of each kind per step, and a
step's ||dtheta|| and drift cover every train op run at that step.

The loop is Morvan-style PPO: before each update a hard copy of the policy into
`oldpi`, then K calls of the actor's train op, then K of the critic's. Steps
are counted per train op, so step s is the actor's s-th call and the critic's
s-th call, K calls apart.
"""

from __future__ import annotations

import collections
import glob
import os

import numpy as np
import tensorflow.compat.v1 as tf
from tensorboard.backend.event_processing import event_file_loader

from tb_gradscope import format as fmt
from tb_gradscope.integrations.tf1 import GraphRecorder, pair_scopes

K = 3
ITERATIONS = 4


def build_ppo(copy_runs: bool = True):
    """A tiny PPO: critic/v, pi and oldpi (trainable=False), two Adam optimizers."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(3)
        S = tf.placeholder(tf.float32, [None, 3], "s")
        A = tf.placeholder(tf.float32, [None, 2], "a")
        ADV = tf.placeholder(tf.float32, [None, 1], "adv")
        R = tf.placeholder(tf.float32, [None, 1], "r")

        def policy(name, trainable):
            with tf.variable_scope(name):
                w = tf.get_variable("w", [3, 2], trainable=trainable)
                return tf.matmul(S, w)

        with tf.variable_scope("critic"):
            v = tf.matmul(S, tf.get_variable("w", [3, 1]))
        pi, oldpi = policy("pi", True), policy("oldpi", False)
        closs = tf.reduce_mean(tf.square(R - v))
        logp = -tf.reduce_sum(tf.square(A - pi), 1, keepdims=True)
        old_logp = -tf.reduce_sum(tf.square(A - oldpi), 1, keepdims=True)
        aloss = -tf.reduce_mean(tf.exp(logp - old_logp) * ADV)
        ctrain = tf.train.AdamOptimizer(0.05).minimize(closs)
        atrain = tf.train.AdamOptimizer(0.05).minimize(
            aloss, var_list=tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, "pi")
        )
        copy = [
            tf.assign(o, p) for o, p in zip(tf.global_variables("oldpi"), tf.global_variables("pi"))
        ]
        init = tf.global_variables_initializer()
    return locals()


def run_ppo(
    logdir: str, copy_runs: bool = True, every: int = K, rules=(), k: int = K, iterations=ITERATIONS
):
    """Trains the PPO with the recorder (blocks of `k` calls per op); returns
    {(op, step): (before, after)} of pi/w and critic/w around each train call,
    read from the raw session."""
    m = build_ppo()
    moves = {}
    with m["graph"].as_default():
        gs = GraphRecorder(
            logdir,
            losses={"aloss": m["aloss"], "closs": m["closs"]},
            train_ops={"aloss": m["atrain"], "closs": m["ctrain"]},
            every_n_steps=every,
            pairs=[pair_scopes("oldpi", "pi", every=K)],
            rules=list(rules),
        )
        raw = tf.Session()
        sess = gs.wrap(raw)
        sess.run(m["init"])
        watched = [tf.global_variables("pi/w")[0], tf.global_variables("critic/w")[0]]
        rng = np.random.default_rng(0)
        count = collections.Counter()
        for _ in range(iterations):
            feed = {
                m["S"]: rng.normal(size=(8, 3)),
                m["A"]: rng.normal(size=(8, 2)),
                m["ADV"]: rng.normal(size=(8, 1)),
                m["R"]: rng.normal(size=(8, 1)),
            }
            if copy_runs:
                sess.run(m["copy"])
            for op in ["atrain"] * k + ["ctrain"] * k:
                before = raw.run(watched)
                sess.run(m[op], feed)
                moves[(op, count[op])] = (before, raw.run(watched))
                count[op] += 1
        sess.close()
    return moves


def raw_events(logdir: str) -> dict[str, list[tuple[int, np.ndarray, fmt.RecordInfo]]]:
    """{tag: [(step, value, info)]} in file order, every event (no TensorBoard dedup)."""
    out: dict[str, list] = {}
    infos: dict[str, fmt.RecordInfo] = {}
    for path in glob.glob(os.path.join(logdir, "events.out.tfevents.*")):
        for event in event_file_loader.EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.content:
                    infos[value.tag] = fmt.parse_plugin_content(value.metadata.plugin_data.content)
                info = infos.get(value.tag)
                if info is None or info.kind not in (
                    fmt.Kind.UPDATE_STATS,
                    fmt.Kind.DRIFT,
                    fmt.Kind.GRAD_STATS,
                ):
                    continue
                array = tf.make_ndarray(value.tensor)
                out.setdefault(value.tag, []).append(
                    (event.step, fmt.decode_table(info, array), info)
                )
    return out


def test_train_ops_in_blocks_write_one_record_of_each_kind_per_step(tmp_path):
    run_ppo(str(tmp_path))
    events = raw_events(str(tmp_path))
    assert events, "nothing recorded"
    for tag, series in events.items():
        steps = [s for s, _, _ in series]
        assert steps == sorted(set(steps)), f"{tag}: steps {steps} (one record per step, in order)"
        assert steps == list(range(0, K * ITERATIONS, K)), f"{tag}: steps {steps}"


def test_block_step_update_norm_covers_each_train_op_run_at_the_step(tmp_path):
    moves = run_ppo(str(tmp_path))
    (series,) = [s for tag, s in raw_events(str(tmp_path)).items() if "update_stats" in tag]
    for step, table, _ in series:
        for scope, op, index in (("pi", "atrain", 0), ("critic", "ctrain", 1)):
            before, after = moves[(op, step)]
            want = float(np.linalg.norm(after[index].astype(np.float64) - before[index]))
            have = table.row(scope)["update_norm"]
            assert want > 0
            assert abs(have - want) <= 1e-5 * want, f"step {step} {scope}: {have} != {want}"


def test_block_drift_is_read_before_the_steps_first_call_and_shows_the_copy(tmp_path):
    run_ppo(str(tmp_path))
    (series,) = [s for tag, s in raw_events(str(tmp_path)).items() if "drift" in tag]
    for step, table, _ in series:
        row = table.row("oldpi")
        assert row["drift"] == 0.0, f"step {step}: the copy just ran, drift {row['drift']}"
        if step > 0:
            assert abs(row["tau"] - 1.0) < 1e-6, (
                f"step {step}: a hard copy is tau 1, got {row['tau']}"
            )


def _check(logdir: str) -> tuple[int, str]:
    import argparse
    import io

    from tb_gradscope.commands import check

    out, err = io.StringIO(), io.StringIO()
    code = check.run(argparse.Namespace(logdir=logdir, rules=None, run_name=None), out=out, err=err)
    return code, out.getvalue() + err.getvalue()


def test_tracks_rule_on_blocks_passes_with_the_copy_and_fails_without_it(tmp_path):
    rule = f"tracks(oldpi, pi, every={K})"
    run_ppo(str(tmp_path / "copied"), rules=[rule])
    run_ppo(str(tmp_path / "never_copied"), copy_runs=False, rules=[rule])
    code, text = _check(str(tmp_path / "copied"))
    assert code == 0, text
    code, text = _check(str(tmp_path / "never_copied"))
    assert code == 1 and rule.replace(" ", "") in text.replace(" ", ""), text


def test_blocks_longer_than_the_paused_windows_mark_unmeasured_updates_nan(tmp_path, capfd):
    """Blocks of 6 calls recorded at every step: steps 4 and 5 find the 4 paused
    windows taken and are written before the critic ran at them. The critic's
    ||delta theta|| there was not measured: NaN, never 0.0; the actor's is
    measured. The warning saying so is printed once."""
    import pytest

    with pytest.warns(UserWarning, match="not measured"):
        moves = run_ppo(str(tmp_path), every=1, k=6, iterations=1)
    (series,) = [s for tag, s in raw_events(str(tmp_path)).items() if "update_stats" in tag]
    norms = {step: table for step, table, _ in series}
    assert sorted(norms) == list(range(6))
    for step in (4, 5):
        assert np.isnan(norms[step].row("critic")["update_norm"]), step
        before, after = moves[("atrain", step)]
        want = float(np.linalg.norm(after[0].astype(np.float64) - before[0]))
        assert norms[step].row("pi")["update_norm"] == pytest.approx(want, rel=1e-5)
    for step in range(4):
        assert norms[step].row("critic")["update_norm"] > 0
    err = capfd.readouterr().err
    assert err.count("not measured") <= 1, err
