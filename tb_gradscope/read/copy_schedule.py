"""Which copy periods a pair's DRIFT records are consistent with.

A record says, for the steps since the pair's previous record, whether the
target moved (`target_moved`), and, for its own step, whether it moved in that
one step (`target_step`). Copies every C steps at phase phi (steps phi + kC)
fit the records when every such interval holds a copy exactly when the target
moved in it. Only the records from the first move to the last are judged:
copies that stop leave a frozen target, told apart. Judging intervals, never single steps, lets records every N steps
judge copies every C whatever the two periods and whichever step the copy
falls on (a delayed or odd-step update).
"""

from __future__ import annotations

import dataclasses

import numpy as np

# Candidate periods tried, nearest the copies' median spacing first.
_MAX_CANDIDATES = 512


@dataclasses.dataclass(frozen=True)
class Intervals:
    """Step intervals (start, end], each with whether the target moved in it."""

    start: np.ndarray
    end: np.ndarray
    moved: np.ndarray

    def __len__(self) -> int:
        return len(self.start)

    def fits(self, period: int) -> bool:
        """Whether copies every `period` steps, at some phase, fit every interval."""
        if period < 1:
            return False
        length = self.end - self.start
        full = length >= period  # holds a copy at any phase
        if np.any(full & ~self.moved):
            return False
        part = ~full
        must = _coverage(period, self.start[part & self.moved], length[part & self.moved])
        never = _coverage(period, self.start[part & ~self.moved], length[part & ~self.moved])
        return bool(np.any((must == int(np.sum(part & self.moved))) & (never == 0)))

    def while_copying(self) -> Intervals:
        """The intervals from the first move to the last: copies that stop
        (a frozen target) or have not started yet are judged apart."""
        if not self.moved.any():
            return self
        ends = self.end[self.moved]
        keep = (self.end >= ends.min()) & (self.end <= ends.max())
        return Intervals(self.start[keep], self.end[keep], self.moved[keep])

    def period(self) -> int | None:
        """The copy period that fits, nearest the median spacing of the moves;
        None when fewer than two moves are seen or no period fits.

        With one copy per interval, two moves d steps apart ending intervals
        of lengths Li, Lj bound the period to (d - Lj, d + Li); periods shorter
        than the widest interval (several copies in one) are tried as well.
        """
        end = self.end[self.moved]
        order = np.argsort(end, kind="stable")
        ends, first = np.unique(end[order], return_index=True)
        if len(ends) < 2:
            return None
        shortest = np.minimum.reduceat((end - self.start[self.moved])[order], first)
        spacing = np.diff(ends)
        lo = max(1, int(np.max(spacing - shortest[1:])) + 1)
        hi = int(np.min(spacing + shortest[:-1])) - 1
        estimate = float(np.median(spacing))
        widest = int(np.max(self.end - self.start))
        candidates = set(range(lo, hi + 1)) | set(range(1, widest + 1))
        ordered = sorted(candidates, key=lambda c: (abs(c - estimate), c))
        return next((c for c in ordered[:_MAX_CANDIDATES] if self.fits(c)), None)


def intervals(
    steps: np.ndarray,
    moved_since: np.ndarray,
    known_since: np.ndarray,
    moved_step: np.ndarray,
    known_step: np.ndarray,
) -> Intervals:
    """The intervals a pooled series' records judge: (previous record, record]
    where `target_moved` is known, and (step - 1, step] where the one-step
    columns are."""
    between = np.flatnonzero(known_since[1:]) + 1
    own = np.flatnonzero(known_step)
    return Intervals(
        start=np.concatenate([steps[between - 1], steps[own] - 1]).astype(np.int64),
        end=np.concatenate([steps[between], steps[own]]).astype(np.int64),
        moved=np.concatenate([moved_since[between], moved_step[own]]).astype(bool),
    )


def _coverage(period: int, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """How many of the intervals (start, start + length], each shorter than
    `period`, hold each phase 0..period-1."""
    diff = np.zeros(period + 1, dtype=np.int64)
    first = (start + 1) % period
    stop = first + length
    wrap = stop > period
    np.add.at(diff, first, 1)
    np.add.at(diff, np.minimum(stop, period), -1)
    np.add.at(diff, np.zeros(int(wrap.sum()), dtype=np.int64), 1)
    np.add.at(diff, stop[wrap] - period, -1)
    return np.cumsum(diff[:-1])
