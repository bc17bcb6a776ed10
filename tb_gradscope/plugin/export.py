"""CSV export of each route, from the same data the JSON comes from.

Numbers are written as in the JSON (NaN, Infinity, -Infinity as those words),
a missing value (null: no gradient, a max_abs/zero_frac not recorded) as an
empty field. Names come from log files and are untrusted:
a text field starting with = + - @ or a control character gets a leading
apostrophe so spreadsheets do not run it as a formula.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable
from typing import Any

_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def text(value: Any) -> str:
    """An untrusted name, safe for a spreadsheet cell."""
    value = "" if value is None else str(value)
    return "'" + value if value.startswith(_FORMULA_START) else value


def number(value: Any) -> str:
    """A JSON-safe number (or None) as a CSV field."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _write(header: list[str], rows: Iterable[list[str]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def run_csv(data: dict[str, Any]) -> str:
    return _write(
        ["scope", "parent", "depth", "leaf"],
        (
            [text(s["name"]), text(s["parent"]), number(s["depth"]), number(s["leaf"])]
            for s in data["scopes"]
        ),
    )


MATRIX_STATS = ("grad_vars", "l2", "max_abs", "nonfinite", "zero_frac")
UPDATE_STATS = ("update_norm", "weight_norm", "ratio")


def matrix_csv(data: dict[str, Any]) -> str:
    def rows():
        for loss, row in data["cells"].items():
            for scope, cell in row.items():
                update = data["updates"].get(scope, {})
                yield (
                    [
                        number(data["step"]),
                        text(loss),
                        text(scope),
                        cell["state"],
                        cell["static_state"] or "",
                    ]
                    + [number(cell[c]) for c in MATRIX_STATS]
                    + [number(cell["violation"])]
                    + [number(update.get(c)) for c in UPDATE_STATS]
                )

    header = [
        "step",
        "loss",
        "scope",
        "state",
        "static_state",
        *MATRIX_STATS,
        "violation",
        *UPDATE_STATS,
    ]
    return _write(header, rows())


def series_csv(data: dict[str, Any]) -> str:
    return _write(
        ["step", "wall_time", "value"],
        ([number(s), number(w), number(v)] for s, w, v in data["points"]),
    )


def flowgraph_csv(data: dict[str, Any]) -> str:
    """One row per (loss, scope) static state, with the blocking ops whose
    producer is that scope (`op_type op_name @ file:line`, `;`-separated)."""
    graph = data["flowgraph"] or {"cells": {}, "blocked_edges": []}
    blocked: dict[tuple[str, str], list[str]] = {}
    for edge in graph["blocked_edges"]:
        source = edge.get("source") or {}
        where = f" @ {source['file']}:{source['line']}" if source else ""
        blocked.setdefault((edge["loss"], edge["producer_scope"]), []).append(
            f"{edge['op_type']} {edge['op_name']}{where}"
        )

    def rows():
        for loss, row in graph["cells"].items():
            for scope, state in row.items():
                yield [
                    text(loss),
                    text(scope),
                    state,
                    text("; ".join(blocked.get((loss, scope), []))),
                ]

    return _write(["loss", "scope", "static_state", "blocked_by"], rows())


def _pairs_csv(
    data: dict[str, Any], values_of: Callable[[dict], dict], lead: Callable[[dict], list[str]]
) -> tuple[Callable[[], Iterable[list[str]]], list[str]]:
    """(rows, columns) for drift/conflict: one row per (pair, step, scope)."""
    columns = list(dict.fromkeys(c for pair in data["pairs"] for c in values_of(pair)))

    def rows():
        for pair in data["pairs"]:
            values = values_of(pair)
            for i, step in enumerate(pair["steps"]):
                for scope in pair["scopes"]:
                    cells = [number(values[c][scope][i]) if c in values else "" for c in columns]
                    yield lead(pair) + [number(step), text(scope)] + cells

    return rows, columns


def drift_csv(data: dict[str, Any]) -> str:
    rows, columns = _pairs_csv(data, lambda p: p["values"], lambda p: [text(p["name"])])
    return _write(["pair", "step", "scope", *columns], rows())


def conflict_csv(data: dict[str, Any]) -> str:
    rows, _ = _pairs_csv(
        data,
        lambda p: {"cosine": p["cosine"]},
        lambda p: [text(p["name"]), text(p["losses"][0]), text(p["losses"][1])],
    )
    return _write(["pair", "loss_a", "loss_b", "step", "scope", "cosine"], rows())


def events_csv(data: dict[str, Any]) -> str:
    fields = ("type", "name", "loss", "scope", "pair", "message")
    return _write(
        ["step", "wall_time", *fields, "evidence"],
        (
            [number(e["step"]), number(e["wall_time"])]
            + [text(e[f]) for f in fields]
            + [text(json.dumps(e["evidence"], ensure_ascii=False, sort_keys=True))]
            for e in data["events"]
        ),
    )
