"""Schedules that do not line up with the recording period (issue 35, items 2, 5, 7, 8).

- a loss computed only on odd steps (TD3's delayed actor, the loop counting
  from 1) is recorded at its first computation at or after each recording step;
- two tf.functions with two optimizers, called inside one eager
  `training_step()` block, keep two optimizer labels;
- gradients from the user's own tape handed to `rec.apply` with rules are not
  a silent pass: the update is recorded and a warning names `rec.gradients`;
- nothing is judged about a pair before its declared sync is due.
"""

from __future__ import annotations

import dataclasses
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.read.anomalies import TARGET_FROZEN, find_anomalies
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.record import Recorder
from tb_gradscope.record._warn import GradscopeWarning
from tests.support.corpus import kit
from tests.support.corpus.shapes_wp import td3_odd


class _Blind:
    """An observer that looks at nothing (the loop runs as the user's would)."""

    def before(self, step, probe):
        pass

    def after(self, drift_step):
        pass


@pytest.fixture(scope="module")
def td3_logs(tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp("td3_odd") / "run")
    td3_odd(False)(logdir, _Blind())
    (logs,) = load_logdir(logdir)
    return logs


def _steps_of(logs, loss: str) -> list[int]:
    return sorted(step for step, tables in logs.grads.items() if loss in tables)


def test_a_loss_computed_only_on_odd_steps_is_recorded_at_its_first_computation_after_each_due_step(
    td3_logs,
):
    # every_n_steps=10, 25 steps; the actor runs at steps 1, 3, ..., 23.
    assert _steps_of(td3_logs, "critic") == [0, 10, 20]
    assert _steps_of(td3_logs, "actor") == [11, 21]
    actor = td3_logs.grads[11]["actor"]
    assert actor.row("actor")["grad_vars"] > 0 and actor.row("actor")["l2"] > 0


def test_two_optimizers_in_two_functions_inside_one_eager_block_keep_distinct_labels(td3_logs):
    _, flowgraph = td3_logs.flowgraphs[-1]
    labels = {info.name: info.optimizer for info in flowgraph.losses}
    assert set(labels) == {"critic", "actor"}
    assert labels["critic"] and labels["actor"] and labels["critic"] != labels["actor"], labels


def test_gradients_from_the_users_own_tape_with_rules_are_recorded_and_warned(tmp_path):
    kit.seed(7)
    net = kit.mlp("net", [4, 1])
    opt = keras.optimizers.Adam(0.01)
    rec = Recorder(
        str(tmp_path / "run"), every_n_steps=1, models={"net": net}, rules=["only(td, [net])"]
    )

    @tf.function
    def step(b):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((net(b["s"]) - b["y"]) ** 2)
        grads = tape.gradient(loss, net.trainable_variables)
        rec.apply(opt, zip(grads, net.trainable_variables))

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            step(kit.batch(i))
    rec.close()
    said = [str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)]
    assert any("rec.gradients" in m and "rules" in m for m in said), said
    (logs,) = load_logdir(str(tmp_path / "run"))
    assert sorted(logs.updates) == [0, 1, 2]
    assert logs.updates[1].row("net")["update_norm"] > 0


def test_targets_moved_only_on_odd_steps_are_not_judged_frozen(tmp_path):
    # 45 steps: drift records at 0, 10, 20, 30, 40; the Polyak targets move at
    # 1, 3, ..., never across the step before a record.
    from tb_gradscope import rules as rules_lib
    from tb_gradscope.read.anomalies import derived_anomalies
    from tb_gradscope.read.violations import evaluate

    logdir = str(tmp_path / "run")
    td3_odd(False)(logdir, _Blind(), steps=45)
    (logs,) = load_logdir(logdir)
    found, _ = derived_anomalies(".", logs.drift, [], logs.updates)
    assert [e for e in found if e.name == TARGET_FROZEN] == [], [e.message for e in found]
    tracks = [
        rules_lib.parse_rule(r)
        for r in (
            "tracks(target_critic1, critic1, tau=0.05)",
            "tracks(target_actor, actor, tau=0.05)",
        )
    ]
    assert evaluate(logs, tracks) == []
    (series,) = [s for name, s in logs.drift.items() if name.startswith("target_critic1")]
    moved = [table.row("target_critic1")["target_moved"] for _, table in series]
    assert np.isnan(moved[0]) and all(m > 0 for m in moved[1:]), moved


def _drift_table(target_step: float, online_step: float, drift: float) -> fmt.Table:
    row = {c: np.nan for c in fmt.DRIFT_COLUMNS}
    online_norm = 1.0
    row.update(
        drift=drift,
        distance=drift * online_norm,
        online_norm=online_norm,
        target_step=target_step,
        online_step=online_step,
        optimizer_vars=0.0,
    )
    info = dataclasses.replace(
        fmt.make_info(
            fmt.Kind.DRIFT,
            "target<-online",
            ["target"],
            {"target": "target", "online": "online", "every": 50},
        ),
        columns=fmt.DRIFT_COLUMNS,
    )
    return fmt.Table(info, np.asarray([[row[c] for c in fmt.DRIFT_COLUMNS]], np.float32))


def test_a_pair_whose_sync_is_not_due_yet_is_not_judged_frozen():
    # 30 steps recorded every 10 of a pair declared hard(every=50): no copy was due.
    steps = [0, 10, 20, 29]
    tables = [_drift_table(0.0, 0.01, 0.01 * (i + 1)) for i in range(len(steps))]
    attrs = tables[0].info.attrs
    events = find_anomalies("target<-online", attrs, steps, tables)
    assert [e for e in events if e.name == TARGET_FROZEN] == [], events


def test_the_delayed_actors_update_is_measured_at_its_late_step(td3_logs):
    """The actor trains on odd steps only: its ||delta theta|| is measured at the
    step its gradients are recorded at (11, 21), over the whole block (the
    critic's update and the targets' Polyak move of that step too), never read
    0.0 at every record."""
    # (Step 0 has none: an eager block's first entry precedes any gradient, so the
    # recorded variables are not known yet.)
    assert sorted(td3_logs.updates) == [10, 11, 20, 21]
    for step in (11, 21):
        table = td3_logs.updates[step]
        assert table.row("actor")["update_norm"] > 0, step
        assert table.row("critic1")["update_norm"] > 0, step
        assert table.row("target_actor")["update_norm"] > 0, step  # its Polyak move


def test_a_tau_read_at_a_step_the_target_did_not_move_says_why(td3_logs):
    from tb_gradscope.read.summary import run_summary

    report = run_summary(td3_logs, step=10)
    (actor,) = [d for d in report["drift"] if d["pair"].startswith("target_actor")]
    assert actor["tau"] == 0.0 and actor["declared_tau"] == 0.05
    assert "did not move in step 10" in actor["tau_note"], actor
    assert "between records" in actor["tau_note"], actor
    first = run_summary(td3_logs, step=0)
    (actor,) = [d for d in first["drift"] if d["pair"].startswith("target_actor")]
    assert actor["tau"] is None and "first record" in actor["tau_note"], actor
