"""Plain data for the run, matrix, flowgraph and events routes.

Each takes the run's `read.runs.RunLogs` (decoded once per change by the
cache), whose indexes (table series by record name across scope layouts, the
kept steps, FlowGraphs, the events with the derived anomalies) make each
request a slice. Everything returned is JSON-safe (see `encoding`).
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any

from tensorboard import errors

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scope_tree
from tb_gradscope.format.metadata import recorded_stat, update_measured
from tb_gradscope.plugin.encoding import jsonable, num
from tb_gradscope.read import flowstate
from tb_gradscope.read.evidence import blocked_text
from tb_gradscope.read.runs import RunLogs

LOSS_KINDS = ("loss", "start_point")


def require_steps(run: RunLogs) -> list[int]:
    """The run's kept grad_stats steps; NotFound when it has none."""
    if not run.grad_steps:
        raise errors.NotFoundError(f"run {run.run!r} has no readable grad_stats steps")
    return run.grad_steps


def scope_nodes(scopes: list[str]) -> list[dict[str, Any]]:
    """Tree-ordered scope nodes; a parent is the nearest ancestor present."""
    present = set(scopes)
    parents = {p for s in scopes for p in scope_tree.ancestors(s)[:-1]}
    nodes = []
    for scope in scopes:
        ancestors = [a for a in scope_tree.ancestors(scope)[:-1] if a in present]
        nodes.append(
            {
                "name": scope,
                "parent": ancestors[-1] if ancestors else None,
                "depth": scope_tree.depth(scope),
                "leaf": scope not in parents,
            }
        )
    return nodes


def run_info(run: RunLogs) -> dict[str, Any]:
    """The run route: losses, scope tree, kept steps, pairs and what exists."""
    kinds: dict[str, str] = {}
    for _, graph in run.flowgraphs:
        for loss in graph.losses:
            kinds[loss.name] = loss.kind
    losses = run.names(fmt.Kind.GRAD_STATS)
    for loss in losses:
        attrs = run.series[(fmt.Kind.GRAD_STATS, loss)][-1].record.info.attrs
        kinds.setdefault(loss, attrs.get("kind") if attrs.get("kind") in LOSS_KINDS else "loss")
    return {
        "run": run.run,
        "losses": [{"name": loss, "kind": kinds[loss]} for loss in losses],
        "scopes": scope_nodes(run.table_scopes),
        "steps": list(run.grad_steps),
        "pairs": run.names(fmt.Kind.DRIFT),
        "conflicts": [conflict_losses(run, name) for name in run.names(fmt.Kind.CONFLICT)],
        "has_flowgraph": bool(run.flowgraphs),
        "event_count": len(run.timeline),
        "warnings": run.tab_warnings,
    }


def conflict_losses(run: RunLogs, name: str) -> list[str]:
    """The two losses of a conflict record: attrs["losses"], else "a|b"."""
    attrs = run.series[(fmt.Kind.CONFLICT, name)][-1].record.info.attrs
    losses = attrs.get("losses")
    if isinstance(losses, list) and len(losses) == 2 and all(isinstance(x, str) for x in losses):
        return list(losses)
    a, _, b = name.partition("|")
    return [a, b]


def matrix(run: RunLogs, step: int | None) -> dict[str, Any]:
    """The loss x scope matrix at a kept step (default: the last)."""
    steps = require_steps(run)
    if step is None:
        step = steps[-1]
    elif step not in run.grads:
        raise errors.NotFoundError(
            f"step {step} is not kept for run {run.run!r} ({len(steps)} steps kept, "
            f"{steps[0]}..{steps[-1]}); pick one from the run's steps"
        )
    graph = run.flowgraph_at(step)
    updates = run.rows_at(fmt.Kind.UPDATE_STATS, "", step) or {}
    violated = _violations(run, step)
    cell_violated = _is_violated if violated else (lambda *_: False)
    losses = run.names(fmt.Kind.GRAD_STATS)
    grads = {loss: run.rows_at(fmt.Kind.GRAD_STATS, loss, step) for loss in losses}
    grads = {loss: rows for loss, rows in grads.items() if rows is not None}
    scopes = scope_tree.tree_order(s for rows in grads.values() for s in rows)
    cuts = run.cuts(graph)
    cells: dict[str, dict[str, Any]] = {}
    for loss, rows in grads.items():
        static_row = graph.cells.get(loss, {}) if graph else {}
        cells[loss] = {}
        for scope in scopes:
            grad = rows.get(scope)
            static = static_row.get(scope)
            cell = cells[loss][scope] = _cell(grad, static, cell_violated(violated, loss, scope))
            if cell["state"] == fmt.BLOCKED:
                cell["blocked_by"] = _blocked_by(cuts, loss, scope)
    return {
        "run": run.run,
        "step": step,
        "losses": list(grads),
        "scopes": scopes,
        "cells": cells,
        "updates": {scope: _update(updates.get(scope)) for scope in scopes},
    }


CELL_STATS = ("l2", "max_abs", "nonfinite", "zero_frac")


def _cell(grad, static: str | None, violation: bool) -> dict[str, Any]:
    """A matrix cell: its states, then its stats, null when no gradient
    arrived (grad_vars 0) or, for max_abs/zero_frac, when the run did not
    record them (`recorded_stat`)."""
    grad_vars = grad.get("grad_vars") if grad else None
    received = bool(grad_vars) and math.isfinite(grad_vars)
    return {
        "state": flowstate.cell_state(grad, static),
        "static_state": static,
        "grad_vars": int(grad_vars) if received else 0,
        **{column: num(recorded_stat(grad, column)) if received else None for column in CELL_STATS},
        "violation": violation,
    }


def _blocked_by(cuts: list, loss: str, scope: str) -> list[dict[str, str]]:
    """Report's text for each cut that blocks `loss` at `scope` (target/l1 is
    blocked by the cut at target/q, which the forward pass reaches from it)."""
    return [text for edge, text, scopes in cuts if edge.loss == loss and scope in scopes]


def _update(row: dict[str, float] | None) -> dict[str, Any]:
    """A scope's applied update; `measured` false when its ‖Δθ‖ was not
    measured at the step (NaN on disk, `update_measured`); all null when the
    scope has no update stats at the step."""
    if row is None:
        return {"update_norm": None, "weight_norm": None, "ratio": None, "measured": None}
    update, weight = row.get("update_norm"), row.get("weight_norm")
    ratio = None
    if update is not None and weight is not None and weight != 0 and math.isfinite(weight):
        ratio = update / weight
    return {
        "update_norm": num(update),
        "weight_norm": num(weight),
        "ratio": num(ratio),
        "measured": update_measured(row),
    }


def _violations(run: RunLogs, step: int) -> set[tuple[str, str]]:
    return {
        (e.loss, e.scope)
        for s, _, e in run.timeline
        if s <= step and e.type == fmt.VIOLATION and e.loss and e.scope
    }


def _is_violated(violated: set[tuple[str, str]], loss: str, scope: str) -> bool:
    """An event names the cell exactly, or with a glob pattern (`target/*`)."""
    for v_loss, v_scope in violated:
        if v_loss != loss:
            continue
        if v_scope == scope or (
            any(c in v_scope for c in "*?") and fnmatch.fnmatchcase(scope, v_scope)
        ):
            return True
    return False


def flowgraph(run: RunLogs) -> dict[str, Any]:
    """The latest FlowGraph, or nulls when the run has none."""
    if not run.flowgraphs:
        return {"run": run.run, "step": None, "flowgraph": None}
    step, graph = run.flowgraphs[-1]
    doc = jsonable(graph.to_json())
    for edge, shown in zip(graph.blocked_edges, doc["blocked_edges"]):
        shown.update(blocked_text(edge, graph))
    return {"run": run.run, "step": step, "flowgraph": doc}


def events(run: RunLogs) -> dict[str, Any]:
    """Violations and anomalies, by step then type then name."""
    return {
        "run": run.run,
        "events": [jsonable({**e.to_json(), "wall_time": wall}) for _, wall, e in run.timeline],
    }
