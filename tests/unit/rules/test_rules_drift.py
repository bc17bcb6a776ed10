"""tracks(target, online, tau=, every=) over drift series written by the real
DriftMonitor and read back through TensorBoard's ingestion."""

from __future__ import annotations

import pytest

from tb_gradscope import rules
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.tracks import check_drift
from tests.support import rules_fixtures as rf


@pytest.fixture(scope="module")
def drift(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("drift_logs")
    rf.write_drift_run(str(root / "ema"), tau_used=0.1, declared_tau=0.1)
    rf.write_drift_run(str(root / "fast"), tau_used=0.5, declared_tau=0.1)
    rf.write_drift_run(str(root / "frozen"), tau_used=0.1, declared_tau=0.1, frozen=True)
    return {logs.run: logs.drift for logs in load_logdir(str(root))}


def test_ema_at_the_declared_tau_tracks(drift):
    assert check_drift([rules.tracks("target", "online", tau=0.1)], drift["ema"]) == []
    assert check_drift([rules.tracks("target", "online")], drift["ema"]) == []


def test_rule_tau_replaces_the_declared_one(drift):
    (event,) = check_drift([rules.tracks("target", "online", tau=0.3)], drift["ema"])
    assert event.evidence["anomaly"] == "tau_mismatch"
    assert event.evidence["declared_tau"] == 0.3
    assert event.evidence["effective_tau"] == pytest.approx(0.1, rel=1e-3)


def test_ema_at_another_tau_breaks_the_rule_with_the_estimate(drift):
    (event,) = check_drift([rules.tracks("target", "online", tau=0.1)], drift["fast"])
    assert event.name == "tracks(target, online, tau=0.1)" and event.pair == "target<-online"
    assert event.evidence["effective_tau"] == pytest.approx(0.5, rel=1e-3)


def test_frozen_target_breaks_tracks(drift):
    (event,) = check_drift([rules.tracks("target", "online")], drift["frozen"])
    assert event.evidence["anomaly"] == "target_frozen"
    assert "did not move" in event.message


def test_undeclared_pair_is_a_violation_naming_the_recorded_pairs(drift):
    (event,) = check_drift([rules.tracks("ema", "online")], drift["ema"], step=35)
    assert "no drift is recorded for target 'ema'" in event.message
    assert event.evidence["pairs"] == ["target<-online"] and event.step == 35
