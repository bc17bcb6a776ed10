"""What `tb-gradscope report` says about one run, as plain JSON-ready data.

Per run, at one recorded step: the loss x scope flow-state table (the same
combination rule as the Gradscope tab, `read.flowstate.cell_state`) with
gradient norms, the blocked edges with their source lines, the drift of every
target/online pair at that step (or the latest before it), anomalies, steps
the loss scaler skipped, and violations (recorded, plus the rules given or
recorded, evaluated over the whole run). With no step chosen, every loss is
shown at its own latest recorded step (`loss_steps`): a loop whose losses are
applied at different steps (PPO's policy and value, each `rec.apply` its own
step; TD3's delayed actor) shows them all. NaN/Inf become null.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.format.metadata import update_measured
from tb_gradscope.format.records import float_or_none
from tb_gradscope.read.evidence import blocked_edge_dict
from tb_gradscope.read.flowstate import NO_GRADIENT, cell_state
from tb_gradscope.read.runs import RunLogs
from tb_gradscope.read.violations import check_run, json_safe


class StepError(ValueError):
    """The requested step was not recorded in a run."""


def run_summary(
    logs: RunLogs, step: int | None = None, rules: Sequence[rules_lib.Rule] = ()
) -> dict[str, Any]:
    """The report of one run at `step` (default: its latest recorded step).

    Raises:
      StepError: `step` is not one of the run's recorded steps.
    """
    steps = logs.steps
    if step is not None and step not in logs.grads and step not in logs.updates:
        near = ", ".join(str(s) for s in _nearest(steps, step)) or "none"
        raise StepError(
            f"step {step} is not recorded in run {logs.run!r} (nearest recorded: {near}; "
            f"{len(steps)} recorded steps from {steps[0] if steps else '-'} to {steps[-1] if steps else '-'})"
        )
    chosen = step if step is not None else (steps[-1] if steps else None)
    flowgraph = logs.flowgraph_at(chosen if chosen is not None else logs.last_step)
    loss_steps = _loss_steps(logs, chosen, step is None)
    checked = check_run(logs, rules)
    anomalies, anomaly_warnings = run_anomalies(logs)
    return {
        "run": logs.run,
        "step": chosen,
        "recorded_steps": {
            "count": len(steps),
            "first": steps[0] if steps else None,
            "last": steps[-1] if steps else None,
        },
        "flowgraph": None
        if flowgraph is None
        else {"source": flowgraph.source, "warnings": flowgraph.warnings},
        "loss_steps": loss_steps,
        **_table(logs, chosen, flowgraph, loss_steps),
        "blocked_edges": [
            blocked_edge_dict(e, flowgraph) for e in (flowgraph.blocked_edges if flowgraph else [])
        ],
        "drift": [
            _drift_at(name, series, chosen) for name, series in sorted(logs.drift.items()) if series
        ],
        "conflict": [
            _conflict(name, series, chosen)
            for name, series in sorted(logs.conflict.items())
            if series
        ],
        "anomalies": [_json_event(e) for e in anomalies],
        "skipped_steps": [
            _json_event(e)
            for e in sorted(logs.events, key=lambda e: e.step)
            if e.type == fmt.SKIPPED
        ],
        "rules": [str(r) for r in checked.rules],
        "violations": [v.to_json() for v in checked.violations],
        "warnings": logs.warnings + anomaly_warnings + checked.warnings,
    }


def run_anomalies(logs: RunLogs) -> tuple[list[fmt.Event], list[str]]:
    """Anomalies the run recorded, plus those `read.anomalies` derives from
    its drift series (as the tab does), each once, by step; and warnings for
    pairs whose series could not be judged."""
    derived, warnings = logs.anomalies
    found = [e for e in logs.events if e.type == fmt.ANOMALY] + derived
    return sorted(found, key=lambda e: (e.step, e.pair, e.name)), warnings


def _nearest(steps: list[int], step: int) -> list[int]:
    return sorted(sorted(steps, key=lambda s: (abs(s - step), s))[:2])


def _loss_steps(logs: RunLogs, step: int | None, latest_each: bool) -> dict[str, int]:
    """loss -> the recorded step its column is read at: `step` for the losses
    recorded there; with `latest_each`, every loss at its latest recorded step."""
    if step is None:
        return {}
    if not latest_each:
        return {loss: step for loss in logs.grads.get(step, {})}
    found: dict[str, int] = {}
    for s in sorted(logs.grads):
        for loss in logs.grads[s]:
            found[loss] = s
    return found


def _table(
    logs: RunLogs, step: int | None, flowgraph: fmt.FlowGraph | None, loss_steps: dict[str, int]
) -> dict[str, Any]:
    grads = {loss: logs.grads[s][loss] for loss, s in loss_steps.items()}
    updates = logs.updates.get(step) if step is not None else None
    # At a recorded step, the losses recorded there (a TD3 actor updated every
    # other step, a GAN's alternating losses), as the tab shows them; by
    # default each loss at its latest step.
    losses = list(grads) if step is not None else list(flowgraph.cells) if flowgraph else []
    scopes = list(flowgraph.scopes) if flowgraph else []
    recorded = [t.info.scopes for t in grads.values()] + (
        [updates.info.scopes] if updates is not None else []
    )
    extra = [s for labels in recorded for s in labels if s not in scopes]
    scopes = scopes_lib.tree_order(scopes + extra) if extra else scopes
    cells: dict[str, dict[str, Any]] = {}
    for loss in losses:
        row = {}
        table = grads.get(loss)
        static_row = flowgraph.cells.get(loss, {}) if flowgraph else {}
        for scope in scopes:
            grad = table.row(scope) if table is not None and scope in table else None
            if step is None:  # nothing recorded yet: only the trace-time state is known
                state = static_row.get(scope) or NO_GRADIENT
            else:
                state = cell_state(grad, static_row.get(scope))
            received = grad is not None and grad["grad_vars"] > 0
            row[scope] = {
                "state": state,
                "static": static_row.get(scope),
                "l2": float_or_none(grad["l2"]) if received else None,
                "nonfinite": float_or_none(grad["nonfinite"]) if received else None,
            }
        cells[loss] = row
    update_rows = {
        s: {k: float_or_none(v) for k, v in updates.row(s).items()}
        for s in scopes
        if updates is not None and s in updates
    }
    # NaN update_norm beside a finite weight_norm: the step was written before
    # a train op ran at it (TF1 blocks), so the update was not measured.
    unmeasured = [s for s in update_rows if not update_measured(updates.row(s))]
    return {
        "losses": losses,
        "scopes": scopes,
        "cells": cells,
        "updates": update_rows,
        "unmeasured_updates": unmeasured,
    }


def _drift_at(name: str, series: list, at: int | None) -> dict[str, Any]:
    """The pair's drift record at step `at`, or the latest before it (the
    first one when all come later; the latest when `at` is None)."""
    earlier = [item for item in series if at is None or item[0] <= at] or series[:1]
    step, table = earlier[-1]
    attrs = table.info.attrs
    target = str(attrs.get("target", ""))
    scopes = table.info.scopes
    row = (
        table.row(target if target in table else scopes[0]) if scopes else {}
    )  # a table may have no rows
    out = {
        "pair": name,
        "target": target,
        "online": str(attrs.get("online", "")),
        "step": step,
        **{
            k: float_or_none(row[k])
            for k in ("drift", "distance", "target_step", "tau", "target_moved")
            if k in row
        },
        "declared_tau": attrs.get("tau"),
        "declared_every": attrs.get("every"),
    }
    out["tau_note"] = _tau_note(out, first=step == series[0][0])
    return out


def _tau_note(drift: dict[str, Any], first: bool) -> str:
    """Why a recorded tau says nothing of the declared one, or "": it is read
    over the one step before the record, and a target moved on other steps
    only (a delayed Polyak update on odd steps) reads 0 there."""
    step, tau = drift["step"], drift.get("tau")
    if tau is None:
        if first:
            return "tau not read: the first record has no step before it to compare with"
        return "tau not read at this step: the target equalled online before it, or that step was not read"
    if tau == 0.0 and drift.get("target_step") == 0.0:
        moved = drift.get("target_moved")
        since = (
            f"; it moved {moved:.3g} since the previous record"
            if moved is not None and moved > 0
            else ""
        )
        return (
            f"the target did not move in step {step}{since}: its rate is judged between records "
            "(tracks rules, anomalies), not read here"
        )
    return ""


def _conflict(name: str, series: list, step: int | None) -> dict[str, Any]:
    """The cosine between two losses' gradients per shared scope, at `step`
    (or the latest recorded before it)."""
    at = [item for item in series if step is None or item[0] <= step] or series[:1]
    recorded, table = at[-1]
    cosine = {
        s: float_or_none(v) for s, v in zip(table.info.scopes, table.column("cosine").tolist())
    }
    return {
        "pair": name,
        "losses": list(table.info.attrs.get("losses", name.split("|"))),
        "step": recorded,
        "cosine": cosine,
    }


def _json_event(event: fmt.Event) -> dict[str, Any]:
    doc = event.to_json()
    doc["evidence"] = json_safe(doc["evidence"])
    return doc
