"""A run's view in the shapes the read side reasons over.

`tb-gradscope doctor` and `check` build these from the command line's
`commands.logs.RunLogs`; the plugin builds them here from its `views.RunView`,
so the findings and violations routes run `read.findings.diagnose` and
`read.violations.check_run` on the same records the CLI reads: the events the
run recorded (not the anomalies derived for display), every kept step.
"""

from __future__ import annotations

import numpy as np

from tb_gradscope import format as fmt
from tb_gradscope.plugin.reader import TableSeries
from tb_gradscope.plugin.views import RunView, conflict_losses
from tb_gradscope.read.records import PairSeries, RunRecords, thin
from tb_gradscope.read.violations import RecordedRun


def run_records(view: RunView) -> RunRecords:
    """The run as the diagnosis (`read.findings`) reads it (a long run
    thinned as the CLI thins it)."""
    grads = {}
    for step in thin(view.steps.tolist()):
        rows = {loss: view.rows_at(fmt.Kind.GRAD_STATS, loss, step) for loss in view.losses}
        grads[step] = {loss: r for loss, r in rows.items() if r is not None}
    conflict = {}
    for name in view.names(fmt.Kind.CONFLICT):
        kept = sorted({int(s) for series in view.groups[(fmt.Kind.CONFLICT, name)] for s in series.steps})
        rows = [(s, view.rows_at(fmt.Kind.CONFLICT, name, s) or {}) for s in kept]
        conflict[tuple(conflict_losses(view, name))] = [
            (s, {scope: row["cosine"] for scope, row in r.items()}) for s, r in rows
        ]
    pairs = []
    for name in view.names(fmt.Kind.DRIFT):
        series = view.groups[(fmt.Kind.DRIFT, name)][0]
        pairs.append(PairSeries(name, series.record.info.attrs, series.steps.tolist(), _tables(series)))
    return RunRecords(
        view.run, [(s, g) for s, _, g in view.flowgraphs], grads, conflict, pairs, list(view.recorded_events),
    )


def recorded_run(view: RunView) -> RecordedRun:
    """The run as rule evaluation (`read.violations`) reads it: every kept
    step's tables (a step written under two scope layouts: the later tag's)."""
    run = RecordedRun(view.run, recorded_rules=list(view.recorded_rules), events=list(view.recorded_events))
    run.flowgraphs = [(s, g) for s, _, g in view.flowgraphs]
    for (kind, name), group in sorted(view.groups.items()):
        for series in sorted(group, key=lambda s: s.record.tag):
            steps, tables = series.steps.tolist(), _tables(series)
            if kind == fmt.Kind.GRAD_STATS:
                for step, table in zip(steps, tables):
                    run.grads.setdefault(step, {})[name] = table
            elif kind == fmt.Kind.UPDATE_STATS:
                run.updates.update(zip(steps, tables))
            elif kind == fmt.Kind.DRIFT:
                run.drift.setdefault(name, []).extend(zip(steps, tables))
    for series in run.drift.values():
        series.sort(key=lambda item: item[0])
    return run


def _tables(series: TableSeries) -> list[fmt.Table]:
    info = series.record.info
    return [fmt.Table(info, values.astype(np.float64)) for values in series.values]
