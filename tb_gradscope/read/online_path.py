"""How far a pair's online network may have moved since training began, from
the single optimizer steps a run recorded.

A target copied from its online network and since moved only toward it (an
EMA, a hard copy: each new target is a weighted mean of the old one and
online) stays within reach of online's path: its distance to online is at
most the length of the path online travelled since the copy. So a target
farther from online than that path was never a copy (`read.anomalies`'
never_synced).

A run records single steps of online only at its recorded steps: the UPDATE
tables' `update_norm` (the optimizer step of each scope) and the DRIFT
tables' `online_step` (||o - op||, a recorded step against the step before).
`path_estimate` takes each unrecorded step to have moved online as far as the
larger of the recorded moves around it. Early steps move most and moves
shrink (or grow, under a learning-rate warm-up), so the larger neighbour
over-estimates the path: the side a "never synced" verdict must err on, since
a correct copy reported as never made sends its user looking for a bug that
is not there. Plain Python, never tensorflow.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tb_gradscope.format.records import Table
from tb_gradscope.read.drift import within

UPDATE_NORM = "update_norm"


def online_moves(updates: Mapping[int, Table] | None, online: Any, until: int) -> dict[int, float]:
    """step -> the norm of one optimizer step of the `online` scope, from the
    UPDATE tables at steps up to `until`: its own row, else the highest rows
    under it pooled (root sum of squares), non-finite values left out. Empty
    when the run recorded none (no UPDATE tables, or an online scope they do
    not hold)."""
    if not updates or not isinstance(online, str) or not online:
        return {}
    moves = {}
    for step in updates:
        if step > until:
            continue  # not decoded: a run's UPDATE tables may be decoded step by step
        table = updates[step]
        if UPDATE_NORM not in table.info.columns:
            continue
        rows = [s for s in table.info.scopes if within(s, online)]
        top = [s for s in rows if not any(o != s and within(s, o) for o in rows)]
        norms = [n for n in (table.row(s)[UPDATE_NORM] for s in top) if math.isfinite(n)]
        if norms:
            moves[int(step)] = math.sqrt(sum(n * n for n in norms))
    return moves


def path_estimate(until: int, moves: Mapping[int, float]) -> float:
    """The length of online's path over steps 0..`until`, from the single-step
    `moves` recorded in that range (step -> norm): a recorded step counts its
    own move, an unrecorded one the larger of the recorded moves before and
    after it (the nearest one at either end). 0 when none was recorded."""
    known = sorted((s, m) for s, m in moves.items() if 0 <= s <= until and math.isfinite(m))
    if not known:
        return 0.0
    total, last_step, last = 0.0, -1, known[0][1]
    for step, move in known:
        total += move + (step - last_step - 1) * max(last, move)
        last_step, last = step, move
    return total + (until - last_step) * last
