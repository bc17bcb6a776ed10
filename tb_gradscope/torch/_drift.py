"""A pair's drift at a recorded step: differences on the device, the nine sums on the host.

At the start of a recorded step the recorder snapshots its parameters (tp,
op: both sides at the end of the step before); a pair with a side outside
them keeps snapshots of its own. At the step's end (`plan`) the pair takes
per tensor the differences d = t - o, e = t - op, b = o - tp and f = t - tr
(tr: the target at the pair's previous record) and hands them to the step's
one grouped sum of squares (`_stats.SquareSums`); a = t - tp, c = o - op
and ||o||^2 are the recorder's update figures when both sides are its
parameters. `sums` makes the per-scope sums of `core.drift.SUMS` from the
moved figures, and `core.drift.drift_table` the DRIFT columns.

The two dot products follow from the squares, as a - b = d and e - c = d:
<a, b> = (|a|^2 + |b|^2 - |d|^2) / 2 and <c, e> = (|c|^2 + |e|^2 - |d|^2) / 2,
exact where the columns are sharpest (a hard copy: a = b, d = 0, tau = 1; a
target left alone: a = 0, <a, b> = 0). Differences are taken in the
parameters' dtype (exact for close values, Sterbenz) and their squares summed
in float64 per piece; `tau` of a Polyak update is good to ~1e-7 / tau.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import torch

from tb_gradscope.core import pairs as core_pairs
from tb_gradscope.core.pairs import Pair
from tb_gradscope.core.tables import drift_info
from tb_gradscope.format import RecordInfo
from tb_gradscope.torch import _torch_private as private
from tb_gradscope.torch._stats import HostRollUp, SquareSums


class PairDrift:
    """One pair's drift: its layout, its snapshots and its sums at a step's end.

    `params`: the recorder's parameters, whose snapshot (`before`) and update
    figures the pair reuses when both its sides are among them."""

    def __init__(
        self,
        pair: Pair,
        stepped: set[int],
        attrs: dict,
        params: Sequence[torch.Tensor] = (),
    ):
        self.pair = pair
        self.layout = core_pairs.pair_layout(pair)
        self.rollup = HostRollUp(self.layout)
        self.optimizer_vars = core_pairs.optimizer_var_counts(
            self.layout, [id(t) in stepped for t in pair.target]
        )
        self.info: RecordInfo = drift_info(pair, self.layout, attrs)
        index = {id(p): v for v, p in enumerate(params)}
        at = [index.get(id(t)) for t in (*pair.target, *pair.online)]
        # Where each side's tensors are among the recorder's parameters, or None:
        # the pair snapshots its own sides.
        self.at: tuple[list[int], list[int]] | None = (
            None if None in at else (at[: len(pair.target)], at[len(pair.target) :])
        )
        self._target = [t.detach() for t in pair.target]
        self._online = [o.detach() for o in pair.online]
        self._own_before: list[torch.Tensor] | None = None
        self._at_record: list[torch.Tensor] | None = None

    @torch.no_grad()
    def snapshot(self) -> None:
        """Both sides now (a recorded step's start), unless the recorder's own
        snapshot holds them."""
        if self.at is not None:
            return
        sides = self._target + self._online
        if self._own_before is None:
            self._own_before = [torch.empty_like(x) for x in sides]
        private.foreach_copy(self._own_before, sides)

    @torch.no_grad()
    def plan(
        self,
        squares: SquareSums,
        before: Sequence[torch.Tensor],
        update_at: Sequence[int],
        values_at: Sequence[int],
    ) -> _Planned:
        """Adds the step's differences to `squares`; keeps the target for the
        next record. `before`: the recorder's snapshot; `update_at` /
        `values_at`: where its ||after - before||^2 and ||after||^2 per
        parameter are in `squares`."""
        t, o = self._target, self._online
        had_record = self._at_record is not None
        if self.at is not None:
            tp = [before[v] for v in self.at[0]]
            op = [before[v] for v in self.at[1]]
            a = [update_at[v] for v in self.at[0]]
            c = [update_at[v] for v in self.at[1]]
            o2 = [values_at[v] for v in self.at[1]]
        else:
            assert self._own_before is not None, "snapshot() first"
            tp, op = self._own_before[: len(t)], self._own_before[len(t) :]
            a = squares.add(private.foreach_sub(t, tp))
            c = squares.add(private.foreach_sub(o, op))
            o2 = squares.add(o)
        d = squares.add(private.foreach_sub(t, o))
        e = squares.add(private.foreach_sub(t, op))
        b = squares.add(private.foreach_sub(o, tp))
        f = squares.add(private.foreach_sub(t, self._at_record)) if had_record else None
        if self._at_record is None:
            self._at_record = [x.clone() for x in t]
        else:
            private.foreach_copy(self._at_record, t)
        return _Planned(d, o2, a, b, c, e, f)

    def sums(self, planned: _Planned, squares: np.ndarray) -> tuple[np.ndarray, bool]:
        """([n_scopes, 9] scope sums in `core.drift.SUMS` order, whether a
        previous record's target was there) from the step's folded squares."""
        d2, o2, a2, b2, c2, e2 = (
            squares[positions]
            for positions in (planned.d, planned.o2, planned.a, planned.b, planned.c, planned.e)
        )
        f2 = squares[planned.f] if planned.f is not None else np.zeros_like(d2)
        ab, ce = (a2 + b2 - d2) / 2, (c2 + e2 - d2) / 2
        per_var = np.stack([d2, o2, a2, ab, b2, c2, ce, e2, f2], axis=1)  # [n_vars, 9]
        return self.rollup.sum(per_var), planned.f is not None


@dataclasses.dataclass(frozen=True)
class _Planned:
    """Where one pair's squares are in the step's `SquareSums`, per target tensor
    (f: None at the pair's first record)."""

    d: list[int]
    o2: list[int]
    a: list[int]
    b: list[int]
    c: list[int]
    e: list[int]
    f: list[int] | None
