"""Target/online pair anomalies, derived from a decoded DRIFT series.

Read side: plain Python and numpy (never tensorflow), so the TensorBoard plugin
and the CLI derive the same events from the same records:

    events = find_anomalies(info.name, info.attrs, steps, tables)

Each event is an ANOMALY `tb_gradscope.format.Event` naming the pair and a
target scope, with the numbers that prove it in `evidence`:

- never_synced: drift at the first recorded step above 0.5 and a target
  farther from online than online's path since step 0 (seed 03 "Change0"; see
  `read.online_path`: a copy that online ran away from is not one);
- target_frozen: the target does not move for several recorded steps (or two
  hard-copy periods; at least one declared period) while online trains;
- moved_by_optimizer: an optimizer writes target variables, or the target
  moves in directions the online network does not explain;
- wrong_direction: online lands exactly on a target that stays put;
- tau_mismatch / every_mismatch: declared tau or copy period vs the one seen;
- moving_stats_not_tracked: non-trainable target state (BatchNorm statistics)
  never moves while the trainable weights are tracked.

Judgements about the whole pair use its trainable part (see `pair_series`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tb_gradscope.format.events import ANOMALY, Event
from tb_gradscope.format.records import Table
from tb_gradscope.read.drift import (
    Mode,
    Series,
    Thresholds,
    copies_fit,
    pair_series,
    scope_modes,
    update_mode,
)
from tb_gradscope.read.drift import within as _within
from tb_gradscope.read.online_path import online_moves, path_estimate

__all__ = [
    "EVERY_MISMATCH",
    "MOVED_BY_OPTIMIZER",
    "MOVING_STATS_NOT_TRACKED",
    "Mode",
    "NEVER_SYNCED",
    "Series",
    "TARGET_FROZEN",
    "TAU_MISMATCH",
    "Thresholds",
    "WRONG_DIRECTION",
    "derived_anomalies",
    "find_anomalies",
    "pair_series",
    "scope_modes",
    "update_mode",
]

NEVER_SYNCED = "never_synced"
TARGET_FROZEN = "target_frozen"
MOVED_BY_OPTIMIZER = "moved_by_optimizer"
WRONG_DIRECTION = "wrong_direction"
TAU_MISMATCH = "tau_mismatch"
EVERY_MISMATCH = "every_mismatch"
MOVING_STATS_NOT_TRACKED = "moving_stats_not_tracked"


@dataclasses.dataclass(frozen=True)
class _Pair:
    name: str
    root: str
    online: str
    attrs: Mapping[str, Any]
    series: Series
    mode: Mode
    th: Thresholds

    def event(self, name: str, index: int, message: str, scope: str = "", **evidence: Any) -> Event:
        return Event(
            type=ANOMALY,
            name=name,
            step=int(self.series.steps[index]),
            message=message,
            scope=scope or self.root,
            pair=self.name,
            evidence={k: _plain(v) for k, v in evidence.items()},
        )


def _plain(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (np.integer, int)) and not isinstance(value, bool):
        return int(value)
    if isinstance(value, (np.floating, float)):
        return float(value)
    return value


def find_anomalies(
    pair_name: str,
    attrs: Mapping[str, Any],
    steps: Sequence[int],
    table_per_step: Sequence[Table],
    thresholds: Thresholds | None = None,
    moves: Mapping[int, float] | None = None,
) -> list[Event]:
    """Every anomaly of one pair's DRIFT series, as ANOMALY events by step.

    `attrs` is the record's metadata attrs (target, online, declared tau/every,
    state_scopes); `table_per_step` the decoded tables, index-aligned with
    `steps`; `moves` the online network's single optimizer steps the run
    recorded elsewhere (step -> norm, `read.online_path.online_moves`), which
    tell a target online ran away from after the copy from one never copied.
    Each event names the pair and a target scope and carries evidence.
    """
    th = thresholds or Thresholds()
    if not len(steps):
        return []
    order = np.argsort(np.asarray(steps), kind="stable")
    steps = [int(steps[i]) for i in order]
    tables = [table_per_step[i] for i in order]
    root, state, series = pair_series(attrs, tables, steps)
    mode = update_mode(series, th)
    online = attrs.get("online")
    p = _Pair(pair_name, root, online if isinstance(online, str) else "", attrs, series, mode, th)
    events = _never_synced(p, moves or {})
    wrong = _wrong_direction(p)
    events += wrong or _target_frozen(p)
    events += _moved_by_optimizer(p, tables)
    events += _mismatch(p)
    events += _moving_stats(p, steps, tables, state)
    return sorted(events, key=lambda e: (e.step, e.name))


def derived_anomalies(
    run: str,
    drift: Mapping[str, Sequence[tuple[int, Table]]],
    recorded: Iterable[Event],
    updates: Mapping[int, Table] | None = None,
) -> tuple[list[Event], list[str]]:
    """The anomalies each pair's DRIFT series ({pair: [(step, table)]}) shows
    that the run did not record itself, and a warning per pair whose series
    cannot be judged. `updates`: the run's UPDATE tables by step (the online
    network's recorded moves). The tab's events route and `tb-gradscope
    report` list these beside the recorded ones."""
    seen = {(e.name, e.pair, e.scope, e.step) for e in recorded}
    found, warnings = [], []
    for name, series in sorted(drift.items()):
        if not series:
            continue
        attrs = series[0][1].info.attrs
        try:
            moves = online_moves(updates, attrs.get("online"), min(s for s, _ in series))
            events = find_anomalies(
                name, attrs, [s for s, _ in series], [t for _, t in series], moves=moves
            )
        except (KeyError, ValueError, IndexError) as e:
            warnings.append(f"run {run!r} pair {name!r}: anomalies not derived: {e}")
            continue
        found += [e for e in events if (e.name, e.pair, e.scope, e.step) not in seen]
    return found, warnings


def _never_synced(p: _Pair, moves: Mapping[int, float]) -> list[Event]:
    """Far from online at the first recorded step, and farther than online
    moved since step 0: a copy that online ran away from (large first steps)
    is as far in drift but within online's path (`read.online_path`). Without
    any recorded move before the first drift record, drift alone decides."""
    s = p.series
    drift, distance, first = s.drift[0], s.distance[0], int(s.steps[0])
    if not drift > p.th.never_synced_drift:
        return []
    seen = {step: move for step, move in moves.items() if step <= first and math.isfinite(move)}
    if math.isfinite(s.online_step[0]):
        seen[first] = max(seen.get(first, 0.0), float(s.online_step[0]))
    path = path_estimate(first, seen)
    if not distance > path:
        return []
    moved = (
        f"online moved about {path:.3g} over steps 0..{first} ({len(seen)} recorded)"
        if seen
        else "no move of online was recorded before it"
    )
    return [
        p.event(
            NEVER_SYNCED,
            0,
            f"pair '{p.name}': target '{p.root}' starts at distance {distance:.3g} from online "
            f"'{p.online}' at the first recorded step ({drift:.3g} of online's norm, drift > "
            f"{p.th.never_synced_drift:g}), while {moved}: it was never initialised from "
            "the online weights; copy them once before training",
            drift=drift,
            threshold=p.th.never_synced_drift,
            distance=distance,
            online_norm=s.online_norm[0],
            online_path=path,
            online_moves_recorded=len(seen),
        )
    ]


def _wrong_direction(p: _Pair) -> list[Event]:
    s, th = p.series, p.th
    pulled = (
        s.defined
        & ~s.moved(th)
        & s.online_moved(th)
        & (s.tau_reverse > 0)
        & (s.tau_reverse <= 1 + 1e-3)
        & (np.nan_to_num(s.residual_reverse, nan=1.0) < th.exact)
    )
    if not pulled.any():
        return []
    i = int(np.argmax(pulled))
    return [
        p.event(
            WRONG_DIRECTION,
            i,
            f"pair '{p.name}': online '{p.online}' was moved onto target '{p.root}' "
            f"(tau_reverse {s.tau_reverse[i]:.3g}) while the target stayed put: the "
            "update copies online <- target; swap its arguments",
            tau_reverse=s.tau_reverse[i],
            residual_reverse=s.residual_reverse[i],
            online_step=s.online_step[i],
            target_step=s.target_step[i],
            drift=s.drift[i],
            points=int(pulled.sum()),
        )
    ]


def _target_frozen(p: _Pair) -> list[Event]:
    s, th = p.series, p.th
    declared = _declared_every(p.attrs)
    period = p.mode.every or declared
    if p.mode.kind == "hard" and not period:
        return []
    idle = s.idle_since_previous(th)  # the movement between two records, never one step
    online = s.online_moved(th)
    run: list[int] = []
    for i in list(np.flatnonzero(s.defined)) + [None]:
        if i is not None and idle[i]:
            run.append(i)
            continue
        span = s.steps[run[-1]] - s.steps[run[0]] if run else 0
        # Nothing is judged before a declared copy is due: the idle run must
        # span a whole declared period (two for a target seen copying).
        long_enough = (
            len(run) >= th.frozen_points
            and (p.mode.kind != "hard" or span >= 2 * int(period))
            and (declared is None or span >= declared)
        )
        if long_enough and online[run].any():
            first, last = run[0], run[-1]
            return [
                p.event(
                    TARGET_FROZEN,
                    first,
                    f"pair '{p.name}': target '{p.root}' did not move from step "
                    f"{s.steps[first]} to {s.steps[last]} ({len(run)} recorded steps) "
                    f"while online '{p.online}' kept training (drift {s.drift[first]:.3g} "
                    f"-> {s.drift[last]:.3g}); check that the target update runs",
                    first_step=s.steps[first],
                    last_step=s.steps[last],
                    points=len(run),
                    drift_first=s.drift[first],
                    drift_last=s.drift[last],
                    mode=p.mode.label,
                )
            ]
        run = []
    return []


def _moved_by_optimizer(p: _Pair, tables: Sequence[Table]) -> list[Event]:
    s, th = p.series, p.th
    written = [_optimizer_scopes(t, p.root) for t in tables]
    static = [i for i, w in enumerate(written) if w]
    moved = s.moved(th)
    tau = np.nan_to_num(s.tau)
    odd = moved & ((s.move_residual() > th.unexplained) | (tau < -0.01) | (tau > 1.01))
    dynamic = int(odd.sum()) >= 2 and odd.sum() >= 0.5 * moved.sum()
    if not static and not dynamic:
        return []
    i = static[0] if static else int(np.argmax(odd))
    if static:
        scopes = written[i]
        how = (
            f"an optimizer writes {len(scopes)} target scope(s) "
            f"({', '.join(scopes[:5])}{', ...' if len(scopes) > 5 else ''})"
        )
    else:
        how = (
            f"its moves are not toward online '{p.online}' (median residual "
            f"{np.median(s.residual[odd]):.3g} at {int(odd.sum())} of {int(moved.sum())} "
            "recorded moves)"
        )
    return [
        p.event(
            MOVED_BY_OPTIMIZER,
            i,
            f"pair '{p.name}': target '{p.root}' is moved by an optimizer or gradient: "
            f"{how}; leave the target out of the optimizer's var_list and stop its gradient",
            optimizer_scopes=written[i] if static else [],
            unexplained_moves=int(odd.sum()),
            moves=int(moved.sum()),
            median_residual=float(np.median(s.residual[odd])) if odd.any() else math.nan,
        )
    ]


def _optimizer_scopes(table: Table, root: str) -> list[str]:
    """The deepest scopes under `root` whose target variables an optimizer writes."""
    if "optimizer_vars" not in table.info.columns:
        return []
    col = table.column("optimizer_vars")
    hit = [s for s, v in zip(table.info.scopes, col) if v > 0 and _within(s, root)]
    return [s for s in hit if not any(o != s and _within(o, s) for o in hit)]


def _mismatch(p: _Pair) -> list[Event]:
    s, mode = p.series, p.mode
    events = []
    moved = np.flatnonzero(s.moved(p.th))
    first = int(moved[0]) if len(moved) else 0
    tau = p.attrs.get("tau")
    if (
        isinstance(tau, (int, float))
        and not isinstance(tau, bool)
        and tau > 0
        and mode.kind in ("ema", "hard")
    ):
        effective = mode.tau if mode.kind == "ema" else 1.0
        if effective is not None and abs(effective - tau) > p.th.tau_tolerance * tau:
            seen = (
                f"effective tau {effective:.4g} (median of {mode.points} recorded steps)"
                if mode.kind == "ema"
                else f"hard copies ({mode.label}, tau 1)"
            )
            events.append(
                p.event(
                    TAU_MISMATCH,
                    first,
                    f"pair '{p.name}': declared tau {tau:g} but target '{p.root}' follows "
                    f"online '{p.online}' with {seen}; fix the update or the declaration",
                    declared_tau=float(tau),
                    effective_tau=effective,
                    mode=mode.label,
                )
            )
    every = _declared_every(p.attrs)
    if every is not None and mode.kind in ("ema", "hard"):
        # Judged per interval between records, whichever steps they fall on.
        if mode.kind == "ema" or not copies_fit(s, every, p.th):
            events.append(
                p.event(
                    EVERY_MISMATCH,
                    first,
                    f"pair '{p.name}': declared a hard copy every {every} steps but target "
                    f"'{p.root}' follows online '{p.online}' as {mode.label}"
                    + (
                        f" (the moves between its {len(s.steps)} records fit no copy "
                        f"every {every} steps)"
                        if mode.kind == "hard"
                        else ""
                    ),
                    declared_every=every,
                    mode=mode.label,
                )
            )
    return events


def _moving_stats(
    p: _Pair, steps: Sequence[int], tables: Sequence[Table], state: Sequence[str]
) -> list[Event]:
    if p.mode.kind not in ("ema", "hard") or not state:
        return []
    stuck, first = [], None
    for scope in state:
        one = Series(steps, tables, [scope])
        online = one.online_moved(p.th)
        resynced = one.synced() & (one.steps > one.steps[0])
        if one.defined.any() and not one.moved(p.th).any() and online.any() and not resynced.any():
            stuck.append((scope, one))
            i = int(np.argmax(online))
            first = i if first is None else min(first, i)
    if not stuck:
        return []
    names = [scope for scope, _ in stuck]
    return [
        p.event(
            MOVING_STATS_NOT_TRACKED,
            first,
            f"pair '{p.name}': {len(names)} non-trainable target scope(s) "
            f"({', '.join(names[:4])}{', ...' if len(names) > 4 else ''}) never move while "
            f"their online twins change, though the trainable weights follow as "
            f"{p.mode.label}: the target update copies only the trainable weights; update "
            "it from every variable of online, moving statistics included",
            scope=names[0],
            scopes=names,
            drift_first=[float(_first_finite(one.drift)) for _, one in stuck],
            drift_last=[float(_last_finite(one.drift)) for _, one in stuck],
        )
    ]


def _declared_every(attrs: Mapping[str, Any]) -> int | None:
    """The declared hard-copy period, if attrs hold a positive integer."""
    every = attrs.get("every")
    return every if isinstance(every, int) and not isinstance(every, bool) and every > 0 else None


def _first_finite(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite[0]) if len(finite) else math.nan


def _last_finite(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite[-1]) if len(finite) else math.nan
