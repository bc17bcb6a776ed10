"""A decoded run built from plain rows, for read-side unit tests that judge
what `decode_run` would hold without writing event files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tb_gradscope import format as fmt
from tb_gradscope.read.runs import RunLogs


def _table(kind: fmt.Kind, name: str, by_scope: Mapping[str, Mapping], attrs=None) -> fmt.Table:
    info = fmt.make_info(kind, name, list(by_scope), attrs)
    values = [[row[c] for c in info.columns] for row in by_scope.values()]
    return fmt.Table(
        info, np.asarray(values, dtype=np.float64).reshape(len(values), len(info.columns))
    )


def run_of_rows(
    flowgraphs: Sequence[tuple[int, fmt.FlowGraph]],
    rows: Mapping[int, Mapping[str, Mapping[str, Mapping]]],
    cosines: Mapping[tuple[str, str], Iterable[tuple[int, Mapping[str, float]]]] | None = None,
    events: Iterable[fmt.Event] = (),
) -> RunLogs:
    """Run "r" of grad_stats rows (step -> loss -> scope -> row) and conflict
    cosines ((a, b) -> [(step, {scope: cosine})]), as `decode_run` holds it."""
    grads = {
        s: {loss: _table(fmt.Kind.GRAD_STATS, loss, r) for loss, r in per.items()}
        for s, per in rows.items()
    }
    conflict = {
        f"{a}|{b}": [
            (
                s,
                _table(
                    fmt.Kind.CONFLICT,
                    f"{a}|{b}",
                    {sc: {"cosine": c} for sc, c in cos.items()},
                    {"losses": [a, b]},
                ),
            )
            for s, cos in series
        ]
        for (a, b), series in (cosines or {}).items()
    }
    return RunLogs(
        "r", grads=grads, conflict=conflict, flowgraphs=list(flowgraphs), events=list(events)
    )
