"""The diagnosis: what in a run is probably a bug, found without rules or declared pairs.

    found = diagnose(records)   # records: a read.records.RunRecords

Runs every detector over what the run recorded (FlowGraph, gradient tables,
drift, conflict, events) and returns each finding once, most specific first:
leaks into targets, between losses (`read/leaks.py`), then the numbers
(`read/health.py`). `tb-gradscope doctor` and the plugin's findings route both
call it, so the command line and the tab cannot disagree. Each detector is
justified by the correctness corpus (docs/CORRECTNESS.md): it fires on no
correct shape, and every mutant gets a finding naming its loss and scope.
Never imports tensorflow.
"""

from __future__ import annotations

from tb_gradscope.read import finding as F
from tb_gradscope.read import health, leaks
from tb_gradscope.read.finding import Finding
from tb_gradscope.read.flow import Flow
from tb_gradscope.read.records import RunRecords, within
from tb_gradscope.read.targets import targets

__all__ = ["Finding", "KINDS", "diagnose"]

KINDS = F.KINDS


def diagnose(records: RunRecords) -> list[Finding]:
    """Every finding of one run, leaks first, then by step, loss and scope."""
    found_targets = targets(records)
    flow = Flow(records, [t.root for t in found_targets])
    leaked = leaks.target_trained(flow, found_targets) + leaks.target_not_cut(flow, found_targets)
    leaked += leaks.cross_loss(flow, exclude=[t.root for t in found_targets])
    taken = [(f.loss, f.scope) for f in leaked]
    found = leaked + health.losses_fighting(flow, taken)
    trained_targets = [f.scope for f in leaked if f.kind == F.TARGET_TRAINED]
    for anomaly in health.pair_anomalies(records):
        if anomaly.evidence.get("anomaly") == "moved_by_optimizer" and any(
            within(t, anomaly.scope) or within(anomaly.scope, t) for t in trained_targets
        ):
            continue  # the target_trained finding names the loss that moves it
        found.append(anomaly)
    found += health.numeric(flow)
    return sorted(found, key=lambda f: (KINDS.index(f.kind), f.first_step, f.loss, f.scope))
