"""A pair's DRIFT series, read side: pooling scopes, the update mode a target shows.

Plain Python and numpy (never tensorflow), for `read.anomalies`, the plugin and
the CLI alike. The columns are the format's (`format.DRIFT_COLUMNS`); what each
one means is documented in `tb_gradscope.record._drift`, which writes them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tb_gradscope.format.records import Table
from tb_gradscope.read.copy_schedule import Intervals, intervals


@dataclasses.dataclass(frozen=True)
class Thresholds:
    """When a pair's behaviour counts as an anomaly.

    Attributes:
      never_synced_drift: drift at the first recorded step above which the
        target was never initialised from the online network (random twins
        sit near sqrt(2)), if it is also farther than online moved since
        step 0 (`read.online_path`).
      frozen_points: recorded step pairs in a row without target movement, while
        the online network moves, that make a target frozen.
      tau_tolerance: relative difference between declared and effective tau.
      exact: residual below which a move is an exact EMA/copy of the other side.
      unexplained: residual above which the target moves by itself.
      moved: target_step / online_norm below which the target did not move.
    """

    never_synced_drift: float = 0.5
    frozen_points: int = 3
    tau_tolerance: float = 0.2
    exact: float = 0.01
    unexplained: float = 0.5
    moved: float = 1e-7


@dataclasses.dataclass(frozen=True)
class Mode:
    """How a target follows its online network: ema(tau), hard(every), none, other."""

    kind: str
    tau: float | None = None
    every: int | None = None
    points: int = 0

    @property
    def label(self) -> str:
        if self.kind == "ema":
            return f"ema({self.tau:.4g})" if self.tau is not None else "ema(?)"
        if self.kind == "hard":
            return f"hard({self.every})" if self.every else "hard(?)"
        return self.kind


class Series:
    """Per-step columns of a set of disjoint scopes, pooled as one scope.

    Norms are pooled as root sums of squares and tau as the least-squares
    ratio, so pooling disjoint scopes gives what one row over their union
    would hold. A scope missing at a step (layout change) counts as absent.
    """

    def __init__(self, steps: Sequence[int], tables: Sequence[Table], scopes: Sequence[str]):
        self.steps = np.asarray(steps, dtype=np.int64)
        sums = np.zeros((len(tables), 8))
        present = np.zeros(len(tables), dtype=bool)
        own_tau = np.full(len(tables), np.nan)  # a lone row's tau, for records without `gap`
        moved2 = np.zeros(len(tables))  # target_moved, pooled (NaN where a row lacks it)
        for i, table in enumerate(tables):
            rows = [table.row(s) for s in scopes if s in table]
            present[i] = bool(rows)
            moved2[i] = sum(row.get("target_moved", np.nan) ** 2 for row in rows)
            if len(rows) == 1:
                own_tau[i] = rows[0]["tau"]
            for row in rows:
                gap, gap_r = row.get("gap", np.nan), row.get("gap_reverse", np.nan)
                sums[i] += [
                    row["distance"] ** 2,
                    row["online_norm"] ** 2,
                    row["target_step"] ** 2,
                    gap**2,
                    _nan0(row["tau"]) * gap**2,
                    row.get("online_step", np.nan) ** 2,
                    gap_r**2,
                    _nan0(row.get("tau_reverse", np.nan)) * gap_r**2,
                ]
        sums[~present] = np.nan
        moved2[~present] = np.nan
        # How far the target moved since the previous record (NaN: unknown).
        self.target_moved = np.sqrt(moved2)
        dist2, on2, a2, b2, ab, c2, e2, ce = sums.T
        self.distance, self.online_norm = np.sqrt(dist2), np.sqrt(on2)
        self.drift = _div(self.distance, self.online_norm)
        self.target_step, self.online_step = np.sqrt(a2), np.sqrt(c2)
        self.gap = np.sqrt(b2)
        self.tau, self.residual = _div(ab, b2), _residual(a2, b2, ab)
        self.tau = np.where(np.isnan(self.tau), own_tau, self.tau)
        self.tau_reverse, self.residual_reverse = _div(ce, e2), _residual(c2, e2, ce)

    def move_residual(self) -> np.ndarray:
        """Residual of each target move, for judging it: 1 (unexplained) where
        undefined, 0 (no contrary evidence) where the record lacks `gap`."""
        return np.where(np.isfinite(self.gap), np.nan_to_num(self.residual, nan=1.0), 0.0)

    @property
    def defined(self) -> np.ndarray:
        """Steps compared with the step before (the step columns are known)."""
        return np.isfinite(self.target_step)

    def moved(self, th: Thresholds) -> np.ndarray:
        return self.defined & (self.target_step > th.moved * np.nan_to_num(self.online_norm))

    def idle_since_previous(self, th: Thresholds) -> np.ndarray:
        """Steps at which the target did not move since the previous record
        (`target_moved`), or, for records without it, across the step before."""
        known = np.isfinite(self.target_moved)
        still = ~(self.target_moved > th.moved * np.nan_to_num(self.online_norm))
        return np.where(known, still, ~self.moved(th)) & self.defined

    def moved_since_previous(self, th: Thresholds) -> np.ndarray:
        """Records whose target moved since the pair's previous record (False
        where `target_moved` is unknown)."""
        known = np.isfinite(self.target_moved)
        return known & (
            np.nan_to_num(self.target_moved) > th.moved * np.nan_to_num(self.online_norm)
        )

    def copy_intervals(self, th: Thresholds) -> Intervals:
        """The step intervals these records judge, each with whether the target moved."""
        return intervals(
            self.steps,
            self.moved_since_previous(th),
            np.isfinite(self.target_moved),
            self.moved(th),
            self.defined,
        )

    def online_moved(self, th: Thresholds) -> np.ndarray:
        return np.isfinite(self.online_step) & (
            self.online_step > th.moved * np.nan_to_num(self.online_norm)
        )

    def synced(self) -> np.ndarray:
        """Steps where target equals online (drift exactly 0, up to float32)."""
        return np.nan_to_num(self.drift, nan=1.0) <= 1e-6


def _nan0(x: float) -> float:
    return 0.0 if not np.isfinite(x) else float(x)


def _div(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def _residual(a2: np.ndarray, b2: np.ndarray, ab: np.ndarray) -> np.ndarray:
    """||a - tau b|| / ||a|| with tau the least-squares ratio, from the sums."""
    explained = _div(ab**2, a2 * b2)
    return np.sqrt(np.clip(1.0 - explained, 0.0, None))


def update_mode(series: Series, th: Thresholds | None = None) -> Mode:
    """The update mode a pooled series shows: ema(tau), hard(every), none or other.

    ema: most moves are an exact fraction 0 < tau < 1 of the way to online, or
    the target moves only between records, by less than it stays away (tau
    unknown: "ema(?)"); hard: every move seen in one step lands exactly on online
    (tau = 1) and the moves seen only between records close most of the
    distance, the period being the one those moves fit; none: the target never
    moves.
    """
    th = th or Thresholds()
    moved = series.moved(th)
    n = int(moved.sum())
    tau, residual = series.tau, series.move_residual()
    ema = moved & (tau > 0) & (tau < 1 - 1e-3) & (residual < 0.1)
    # A copy made before the optimizer step of the same step lands near tau = 1.
    copy = moved & (np.abs(tau - 1) <= 0.05) & (residual < 0.1)
    between = series.moved_since_previous(th) & ~moved  # moves no record saw in one step
    if n and ema.sum() >= 0.8 * n:
        return Mode("ema", tau=float(np.median(tau[ema])), points=int(ema.sum()))
    points = n + int(between.sum())
    if copy.sum() == n and points:
        closes = series.target_moved[between] >= series.distance[between]
        if n == 0 and not closes.all():
            return Mode("ema", points=points)
        return Mode("hard", every=_copy_period(series, th), points=points)
    if n == 0:
        defined = int(series.defined.sum())
        return Mode("none", points=defined) if defined else Mode("unknown")
    return Mode("other", points=n)


def copies_fit(series: Series, every: int, th: Thresholds | None = None) -> bool:
    """Whether hard copies every `every` steps fit the records from the first
    move to the last, whatever steps the records fall on."""
    th = th or Thresholds()
    if not np.isfinite(series.target_moved).any():  # records without `target_moved`
        spacing = _period(series.steps) or 1
        return _copy_period(series, th) == math.lcm(every, spacing)
    return series.copy_intervals(th).while_copying().fits(every)


def _copy_period(series: Series, th: Thresholds) -> int | None:
    if not np.isfinite(series.target_moved).any():
        # Only the records' own steps are known: copies land where drift is 0.
        return _period(series.steps[series.synced() | series.moved(th)])
    return series.copy_intervals(th).while_copying().period()


def _period(steps: np.ndarray) -> int | None:
    diffs = np.diff(np.unique(steps))
    return int(np.gcd.reduce(diffs)) if len(diffs) else None


def pair_series(
    attrs: Mapping[str, Any], tables: Sequence[Table], steps: Sequence[int]
) -> tuple[str, list[str], Series]:
    """(root scope, state scopes, the pooled series of the trainable weights).

    The trainable part pools the largest scopes under the target root that hold
    no state scope, so untracked BatchNorm statistics do not bias tau.
    """
    scopes = list(dict.fromkeys(s for t in tables for s in t.info.scopes))
    root = attrs.get("target")
    if not isinstance(root, str) or root not in scopes:
        root = min(scopes, key=lambda s: (s.count("/"), s)) if scopes else ""
    declared = attrs.get("state_scopes")
    # attrs come from a log: anything but a list of names is no state scope.
    state = (
        [s for s in declared if isinstance(s, str) and s in scopes]
        if isinstance(declared, list)
        else []
    )
    cover = [
        s
        for s in scopes
        if within(s, root)
        and not any(within(x, s) for x in state)
        and (s == root or _parent(s) not in scopes or any(within(x, _parent(s)) for x in state))
    ]
    return root, state, Series(steps, tables, cover or [root])


def within(scope: str, root: str) -> bool:
    return scope == root or scope.startswith(root + "/")


def _parent(scope: str) -> str:
    return scope.rpartition("/")[0]


def scope_modes(
    steps: Sequence[int], tables: Sequence[Table], th: Thresholds | None = None
) -> dict[str, Mode]:
    """The update mode of every scope of a DRIFT series, each judged alone."""
    scopes = list(dict.fromkeys(s for t in tables for s in t.info.scopes))
    return {s: update_mode(Series(steps, tables, [s]), th) for s in scopes}
