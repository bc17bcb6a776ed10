"""Plain data for the run, matrix, flowgraph and events routes.

A RunView indexes one RunData once (series grouped by record name across scope
layouts, the kept steps, parsed FlowGraphs and events), so each request only
slices arrays. Everything returned is JSON-safe (see `encoding`).
"""

from __future__ import annotations

import fnmatch
import math
from typing import Any

import numpy as np
from tensorboard import errors

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scope_tree
from tb_gradscope.format.metadata import recorded_stat
from tb_gradscope.plugin.cache import RunData
from tb_gradscope.plugin.encoding import jsonable, num
from tb_gradscope.read import flowstate, runs
from tb_gradscope.read.anomalies import derived_anomalies
from tb_gradscope.read.evidence import blocked_edge_dict, blocked_fix, blocked_line
from tb_gradscope.read.reader import TableSeries

LOSS_KINDS = ("loss", "start_point")


class RunView:
    """Indexes of one run's decoded data, built once per RunData."""

    def __init__(self, data: RunData):
        self.run = data.run
        self.warnings = data.warnings
        self._cuts: dict[int, list] = {}
        self.groups: dict[tuple[fmt.Kind, str], list[TableSeries]] = {}
        for record in sorted(data.listing.records.values(), key=lambda r: (len(r.tag), r.tag)):
            series = data.tables.get(record.tag)
            if series is not None:
                self.groups.setdefault((record.info.kind, record.info.name), []).append(series)
        self.losses = sorted(name for kind, name in self.groups if kind == fmt.Kind.GRAD_STATS)
        grad = [
            s
            for (kind, _), group in self.groups.items()
            if kind == fmt.Kind.GRAD_STATS
            for s in group
        ]
        self.steps = (
            np.unique(np.concatenate([s.steps for s in grad])) if grad else np.zeros(0, np.int64)
        )
        self.flowgraphs, graph_warnings = runs.flowgraphs(data.listing, data.blobs)
        recorded, event_warnings = runs.recorded_events(data.listing, data.blobs)
        self.warnings += graph_warnings + event_warnings
        self.events = sorted(
            recorded + self._derived_anomalies(data, [e for _, _, e in recorded]),
            key=lambda item: (item[2].step, item[2].type, item[2].name),
        )

    def _derived_anomalies(self, data: RunData, recorded: list[fmt.Event]) -> list:
        """[(step, wall_time, event)] of the anomalies `read.anomalies` derives
        from each pair's DRIFT series and the online network's recorded moves
        (UPDATE tables up to the last pair's first drift record: what
        never_synced reads), the same the CLI reports, minus those the run
        recorded itself."""
        drift = [
            s for (kind, _), group in self.groups.items() if kind == fmt.Kind.DRIFT for s in group
        ]
        updates = [
            s
            for (kind, _), group in self.groups.items()
            if kind == fmt.Kind.UPDATE_STATS
            for s in group
        ]
        last_first = max((int(s.steps[0]) for s in drift if len(s.steps)), default=0)
        found, warnings = derived_anomalies(
            self.run,
            runs.drift_series(drift),
            recorded,
            runs.update_tables(updates, until=last_first),
        )
        self.warnings += warnings
        wall_of = {}
        for series in sorted(drift, key=lambda s: s.record.tag):
            wall_of.update(zip(series.steps.tolist(), series.wall_times.tolist()))
        return [(e.step, wall_of.get(e.step, 0.0), e) for e in found]

    def cuts(self, graph: fmt.FlowGraph | None) -> list:
        """`blocked_cuts(graph)`, computed once per FlowGraph of the run."""
        if graph is None:
            return []
        found = self._cuts.get(id(graph))
        if found is None:
            found = self._cuts[id(graph)] = blocked_cuts(graph)
        return found

    def names(self, kind: fmt.Kind) -> list[str]:
        return sorted(name for k, name in self.groups if k == kind)

    def rows_at(self, kind: fmt.Kind, name: str, step: int) -> dict[str, dict[str, float]] | None:
        """{scope: {column: value}} of a record at a step, merged across
        layouts, or None when the record has no data at that step."""
        rows: dict[str, dict[str, float]] | None = None
        for series in self.groups.get((kind, name), []):
            i = series.index_of(step)
            if i is None:
                continue
            rows = rows or {}
            info = series.record.info
            table = series.values[i].tolist()
            for scope, values in zip(info.scopes, table):
                rows[scope] = dict(zip(info.columns, values))
        return rows

    def flowgraph_at(self, step: int) -> fmt.FlowGraph | None:
        """The latest FlowGraph written at or before `step` (else the first)."""
        if not self.flowgraphs:
            return None
        before = [g for s, _, g in self.flowgraphs if s <= step]
        return before[-1] if before else self.flowgraphs[0][2]

    def all_scopes(self) -> list[str]:
        return scope_tree.tree_order(
            s
            for group in self.groups.values()
            for series in group
            for s in series.record.info.scopes
        )

    def require_steps(self) -> np.ndarray:
        if not len(self.steps):
            raise errors.NotFoundError(f"run {self.run!r} has no readable grad_stats steps")
        return self.steps


def get_view(data: RunData) -> RunView:
    """The RunView of a RunData, built on first use."""
    view = data.derived.get("view")
    if view is None:
        view = data.derived["view"] = RunView(data)
    return view


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


def run_info(view: RunView) -> dict[str, Any]:
    """The run route: losses, scope tree, kept steps, pairs and what exists."""
    kinds: dict[str, str] = {}
    for _, _, graph in view.flowgraphs:
        for loss in graph.losses:
            kinds[loss.name] = loss.kind
    for loss in view.losses:
        attrs = view.groups[(fmt.Kind.GRAD_STATS, loss)][-1].record.info.attrs
        kinds.setdefault(loss, attrs.get("kind") if attrs.get("kind") in LOSS_KINDS else "loss")
    return {
        "run": view.run,
        "losses": [{"name": loss, "kind": kinds[loss]} for loss in view.losses],
        "scopes": scope_nodes(view.all_scopes()),
        "steps": view.steps.tolist(),
        "pairs": view.names(fmt.Kind.DRIFT),
        "conflicts": [conflict_losses(view, name) for name in view.names(fmt.Kind.CONFLICT)],
        "has_flowgraph": bool(view.flowgraphs),
        "event_count": len(view.events),
        "warnings": list(view.warnings),
    }


def conflict_losses(view: RunView, name: str) -> list[str]:
    """The two losses of a conflict record: attrs["losses"], else "a|b"."""
    attrs = view.groups[(fmt.Kind.CONFLICT, name)][-1].record.info.attrs
    losses = attrs.get("losses")
    if isinstance(losses, list) and len(losses) == 2 and all(isinstance(x, str) for x in losses):
        return list(losses)
    a, _, b = name.partition("|")
    return [a, b]


def matrix(view: RunView, step: int | None) -> dict[str, Any]:
    """The loss x scope matrix at a kept step (default: the last)."""
    steps = view.require_steps()
    if step is None:
        step = int(steps[-1])
    elif not (
        np.searchsorted(steps, step) < len(steps) and steps[np.searchsorted(steps, step)] == step
    ):
        raise errors.NotFoundError(
            f"step {step} is not kept for run {view.run!r} ({len(steps)} steps kept, "
            f"{int(steps[0])}..{int(steps[-1])}); pick one from the run's steps"
        )
    graph = view.flowgraph_at(step)
    updates = view.rows_at(fmt.Kind.UPDATE_STATS, "", step) or {}
    violated = _violations(view, step)
    cell_violated = _is_violated if violated else (lambda *_: False)
    grads = {loss: view.rows_at(fmt.Kind.GRAD_STATS, loss, step) for loss in view.losses}
    grads = {loss: rows for loss, rows in grads.items() if rows is not None}
    scopes = scope_tree.tree_order(s for rows in grads.values() for s in rows)
    cuts = view.cuts(graph)
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
        "run": view.run,
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


def blocked_text(edge: fmt.BlockedEdge) -> dict[str, str]:
    """A blocked edge in `tb-gradscope report`'s words: its line and its fix."""
    doc = blocked_edge_dict(edge)
    return {"line": blocked_line(doc), "fix": blocked_fix(doc)}


def blocked_cuts(graph: fmt.FlowGraph) -> list[tuple[fmt.BlockedEdge, dict[str, str], set[str]]]:
    """Each blocked edge of `graph`, report's text for it, and the scopes whose
    cells it blocks: its producer scope and every scope-graph node the forward
    pass reaches it from, with all their ancestors (roll-ups). One backward walk
    per blocked edge, done once per FlowGraph."""
    backward: dict[str, list[str]] = {}
    for edge in graph.edges:
        backward.setdefault(edge.dst, []).append(edge.src)
    cuts = []
    for blocked in graph.blocked_edges:
        reach = {blocked.producer_scope}
        frontier = [blocked.producer_scope]
        while frontier:
            for src in backward.get(frontier.pop(), []):
                if src not in reach:
                    reach.add(src)
                    frontier.append(src)
        scopes = {a for node in reach for a in scope_tree.ancestors(node)}
        cuts.append((blocked, blocked_text(blocked), scopes))
    return cuts


def _blocked_by(cuts: list, loss: str, scope: str) -> list[dict[str, str]]:
    """Report's text for each cut that blocks `loss` at `scope` (target/l1 is
    blocked by the cut at target/q, which the forward pass reaches from it)."""
    return [text for edge, text, scopes in cuts if edge.loss == loss and scope in scopes]


def _update(row: dict[str, float] | None) -> dict[str, Any]:
    if row is None:
        return {"update_norm": None, "weight_norm": None, "ratio": None}
    update, weight = row.get("update_norm"), row.get("weight_norm")
    ratio = None
    if update is not None and weight is not None and weight != 0 and math.isfinite(weight):
        ratio = update / weight
    return {"update_norm": num(update), "weight_norm": num(weight), "ratio": num(ratio)}


def _violations(view: RunView, step: int) -> set[tuple[str, str]]:
    return {
        (e.loss, e.scope)
        for s, _, e in view.events
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


def flowgraph(view: RunView) -> dict[str, Any]:
    """The latest FlowGraph, or nulls when the run has none."""
    if not view.flowgraphs:
        return {"run": view.run, "step": None, "flowgraph": None}
    step, _, graph = view.flowgraphs[-1]
    doc = jsonable(graph.to_json())
    for edge, shown in zip(graph.blocked_edges, doc["blocked_edges"]):
        shown.update(blocked_text(edge))
    return {"run": view.run, "step": step, "flowgraph": doc}


def events(view: RunView) -> dict[str, Any]:
    """Violations and anomalies, by step then type then name."""
    return {
        "run": view.run,
        "events": [jsonable({**e.to_json(), "wall_time": wall}) for _, wall, e in view.events],
    }
