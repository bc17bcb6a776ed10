"""tracks(target, online, tau=, every=) over DRIFT series read back from real event files."""

from __future__ import annotations

import pytest

from tb_gradscope import rules
from tb_gradscope.commands import logs as logs_lib
from tests import rules_fixtures as rf


def _drift(tmp_path, **kwargs) -> dict:
    rf.write_records(str(tmp_path / "run"), rf.ema_drift_records("target<-online", steps=range(0, 50, 5), **kwargs))
    (logs,) = logs_lib.load_logdir(str(tmp_path))
    return logs.drift


def test_ema_at_the_declared_tau_tracks(tmp_path):
    drift = _drift(tmp_path, tau=0.05)
    assert rules.check_drift([rules.tracks("target", "online", tau=0.05)], drift) == []
    assert rules.check_drift([rules.tracks("target", "online")], drift) == []


def test_ema_at_another_tau_breaks_the_rule_with_the_estimate(tmp_path):
    drift = _drift(tmp_path, tau=0.2)
    (event,) = rules.check_drift([rules.tracks("target", "online", tau=0.01)], drift)
    assert event.evidence["tau"] == 0.01
    assert event.evidence["tau_estimated"] == pytest.approx(0.2, rel=1e-3)
    assert event.pair == "target<-online" and event.step == 45


def test_frozen_target_never_moves(tmp_path):
    drift = _drift(tmp_path, tau=0.05, frozen=True)
    (event,) = rules.check_drift([rules.tracks("target", "online")], drift)
    assert "never moved over 10 recorded steps" in event.message
    assert event.evidence["drift"] > 0


def test_undeclared_pair_is_a_violation_naming_the_recorded_pairs(tmp_path):
    drift = _drift(tmp_path, tau=0.05)
    (event,) = rules.check_drift([rules.tracks("ema", "online")], drift, step=45)
    assert "no drift is recorded for target 'ema'" in event.message
    assert event.evidence["pairs"] == ["target<-online"] and event.step == 45
