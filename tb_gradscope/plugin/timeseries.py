"""Plain data for the series, drift and conflict routes.

Series of one (kind, name) may span several scope layouts (tags `...~1`); they
are merged by scope name. Downsampling is server-side and uniform in index,
always keeping the first and last kept step.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from tensorboard import errors

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scope_tree
from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS
from tb_gradscope.plugin.encoding import jsonable, nums
from tb_gradscope.plugin.views import conflict_losses
from tb_gradscope.read.reader import TableSeries
from tb_gradscope.read.runs import RunLogs

DEFAULT_POINTS = 1000
MAX_POINTS = 100_000
TABLE_KINDS = tuple(k.value for k, spec in fmt.KIND_SPECS.items() if spec.is_table)


def pick(n: int, points: int) -> np.ndarray:
    """Indices of at most `points` of `n` items, evenly spaced, first and last kept."""
    if n <= points:
        return np.arange(n)
    # Strictly increasing because n > points: no duplicates to remove.
    return (np.arange(points, dtype=np.int64) * (n - 1)) // (points - 1)


def series(
    run: RunLogs, kind: str, name: str, scope: str, stat: str, points: int = DEFAULT_POINTS
) -> dict[str, Any]:
    """[[step, wall_time, value]] of one cell's stat, downsampled."""
    group = _group(run, kind, name)
    columns = {c for s in group for c in s.record.info.columns}
    if stat not in columns:
        raise errors.InvalidArgumentError(
            f"stat {stat!r} is not a column of {kind}; use one of {sorted(columns)}"
        )
    parts = [s for s in group if scope in s.record.info.scopes and stat in s.record.info.columns]
    if not parts:
        raise errors.NotFoundError(
            f"run {run.run!r} has no {kind} {name!r} series for scope {scope!r}"
        )
    steps, walls, values = [], [], []
    for s in parts:
        info = s.record.info
        steps.append(s.steps)
        walls.append(s.wall_times)
        values.append(s.values[:, info.scopes.index(scope), info.columns.index(stat)])
    if len(parts) == 1:  # one layout: steps are already sorted and unique
        step_arr, wall_arr, value_arr = steps[0], walls[0], values[0]
    else:
        step_arr, wall_arr, value_arr = _merge(steps, walls, values)
    keep = pick(len(step_arr), points)
    rows = zip(
        step_arr[keep].tolist(), wall_arr[keep].tolist(), _values(kind, stat, value_arr[keep])
    )
    return {
        "run": run.run,
        "kind": kind,
        "name": name,
        "scope": scope,
        "stat": stat,
        "points": [[s, w, v] for s, w, v in rows],
    }


def drift(run: RunLogs, points: int = DEFAULT_POINTS) -> dict[str, Any]:
    """Every drift pair: its scopes, steps and each column per scope."""
    pairs = []
    for name in run.names(fmt.Kind.DRIFT):
        group = run.series[(fmt.Kind.DRIFT, name)]
        table = _dense(group, points)
        pairs.append(
            {
                "name": name,
                "attrs": _attrs(group),
                "scopes": table["scopes"],
                "steps": table["steps"],
                "values": table["values"],
            }
        )
    return {"run": run.run, "pairs": pairs}


def conflict(run: RunLogs, points: int = DEFAULT_POINTS) -> dict[str, Any]:
    """Every pair of losses: cosine of their gradients per shared scope."""
    pairs = []
    for name in run.names(fmt.Kind.CONFLICT):
        table = _dense(run.series[(fmt.Kind.CONFLICT, name)], points)
        pairs.append(
            {
                "name": name,
                "losses": conflict_losses(run, name),
                "scopes": table["scopes"],
                "steps": table["steps"],
                "cosine": table["values"].get("cosine", {}),
            }
        )
    return {"run": run.run, "pairs": pairs}


def _group(run: RunLogs, kind: str, name: str) -> list[TableSeries]:
    if kind not in TABLE_KINDS:
        raise errors.InvalidArgumentError(
            f"kind {kind!r} is not a table kind; use one of {list(TABLE_KINDS)}"
        )
    group = run.series.get((fmt.Kind(kind), name))
    if not group:
        known = run.names(fmt.Kind(kind))
        raise errors.NotFoundError(
            f"run {run.run!r} has no {kind} series named {name!r} (it has {known})"
        )
    return group


def _values(kind: str, stat: str, values: np.ndarray) -> list:
    """JSON-safe values; a NaN in a grad_stats column the run may leave out
    (max_abs, zero_frac) means "not recorded" and is null."""
    out = nums(values)
    if kind != fmt.Kind.GRAD_STATS.value or stat not in OPTIONAL_GRAD_COLUMNS:
        return out
    return [None if missing else v for v, missing in zip(out, np.isnan(values).tolist())]


def _merge(steps: list, walls: list, values: list) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Concatenates layouts by step; a later layout wins a duplicated step."""
    step_arr = np.concatenate(steps)
    wall_arr = np.concatenate(walls)
    value_arr = np.concatenate(values)
    order = np.argsort(step_arr, kind="stable")
    step_arr, wall_arr, value_arr = step_arr[order], wall_arr[order], value_arr[order]
    last = np.ones(len(step_arr), dtype=bool)
    last[:-1] = step_arr[1:] != step_arr[:-1]
    return step_arr[last], wall_arr[last], value_arr[last]


def _dense(group: list[TableSeries], points: int) -> dict[str, Any]:
    """{scopes, steps, values: {column: {scope: [num|None per step]}}} over
    the union of the layouts' steps, downsampled; None where a scope's layout
    has no data at a step."""
    all_steps = np.unique(np.concatenate([s.steps for s in group]))
    steps = all_steps[pick(len(all_steps), points)]
    scopes = scope_tree.tree_order(sc for s in group for sc in s.record.info.scopes)
    columns = list(dict.fromkeys(c for s in group for c in s.record.info.columns))
    values: dict[str, dict[str, list]] = {
        c: {sc: [None] * len(steps) for sc in scopes} for c in columns
    }
    for s in group:
        info = s.record.info
        pos = np.minimum(np.searchsorted(s.steps, steps), len(s.steps) - 1)
        hit = np.flatnonzero(s.steps[pos] == steps)
        if not len(hit):
            continue
        block = s.values[pos[hit]]
        for r, scope in enumerate(info.scopes):
            for c, column in enumerate(info.columns):
                out = values[column][scope]
                for i, v in zip(hit.tolist(), nums(block[:, r, c])):
                    out[i] = v
    return {"scopes": scopes, "steps": steps.tolist(), "values": values}


def _attrs(group: list[TableSeries]) -> dict[str, Any]:
    return jsonable(dict(group[-1].record.info.attrs))
