"""`tb-gradscope report` at a chosen step and by default, when losses are
recorded at different steps (issue 35, item 10)."""

from __future__ import annotations

import json

from tb_gradscope import format as fmt
from tests.support import rules_fixtures as rf
from tests.unit.commands.test_cli_report import report

SCOPES = ["policy", "policy/l1", "value", "value/l1"]


def test_report_at_a_step_shows_the_drift_of_that_step(tmp_path):
    rf.write_records(str(tmp_path / "ema"), rf.dqn_records(False))  # grads at steps 0, 10, 20
    rf.write_drift_run(
        str(tmp_path / "ema"), tau_used=0.05, declared_tau=0.05, steps=21
    )  # drift every 5
    code, out, err = report(str(tmp_path), "--run", "ema", "--step", "10", "--format", "json")
    assert code == 0, err
    (run,) = json.loads(out)["runs"]
    assert [d["step"] for d in run["drift"]] == [10]
    code, text, _ = report(str(tmp_path), "--run", "ema", "--step", "10")
    assert "at step 10: drift" in text


def test_default_report_shows_every_loss_at_its_latest_step(tmp_path):
    """A PPO loop whose policy and value updates are each their own
    `rec.apply` step: policy at even steps, value at odd ones."""
    policy = fmt.make_info(fmt.Kind.GRAD_STATS, "policy", SCOPES)
    value = fmt.make_info(fmt.Kind.GRAD_STATS, "value", SCOPES)
    on, off = [2.0, 1.0, 0.5, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0, 0.0]
    records = []
    for step in range(6):
        if step % 2 == 0:
            records.append((policy, step, [on, on, off, off]))
        else:
            records.append((value, step, [off, off, on, on]))
    rf.write_records(str(tmp_path / "ppo"), records)
    code, out, err = report(str(tmp_path), "--format", "json")
    assert code == 0, err
    (run,) = json.loads(out)["runs"]
    assert set(run["losses"]) == {"policy", "value"}
    assert run["loss_steps"] == {"policy": 4, "value": 5}
    assert run["cells"]["policy"]["policy/l1"]["l2"] == 1.0
    assert run["cells"]["value"]["value/l1"]["l2"] == 1.0
    code, text, _ = report(str(tmp_path))
    assert "policy at step 4" in text and "value at step 5" in text
    code, out, _ = report(str(tmp_path), "--step", "5", "--format", "json")
    assert json.loads(out)["runs"][0]["losses"] == ["value"]  # a chosen step shows what it recorded
