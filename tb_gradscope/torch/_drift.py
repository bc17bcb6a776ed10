"""A pair's drift at a recorded step, on the device: snapshots and the nine sums.

At the start of a recorded step the recorder snapshots both sides of every
pair (tp, op: their values at the end of the step before); at its end it
takes the sums of `core.drift.SUMS` per tensor, rolls them up to the pair's
target scopes, and hands them to the host with the step's other tables;
`core.drift.drift_table` makes the DRIFT columns there. The target at the
pair's previous record (tr) is kept for `target_moved`.

The seven squares are grouped norms over views of the float64
differences (`_stats.sums_of_squares`: one per row on a CPU, one in all on a
GPU); the two dot products follow from
them, as a - b = t - o = -(c - e) = d:
<a, b> = (|a|^2 + |b|^2 - |d|^2) / 2 and <c, e> = (|c|^2 + |e|^2 - |d|^2) / 2,
exact where the columns are sharpest (a hard copy: a = b, d = 0, tau = 1; a
target left alone: a = 0, <a, b> = 0). A cumulative sum over nine products of
every element cost more than the rest of a recorded step.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tb_gradscope.core import pairs as core_pairs
from tb_gradscope.core.pairs import Pair
from tb_gradscope.core.tables import drift_info
from tb_gradscope.format import RecordInfo
from tb_gradscope.torch._stats import ScopeRollUp, flat, sums_of_squares


class PairDrift:
    """One pair's drift: its layout, its snapshots and its sums at a step's end."""

    def __init__(
        self,
        pair: Pair,
        stepped: set[int],
        attrs: dict,
        params: Sequence[torch.Tensor] = (),
    ):
        self.pair = pair
        self.layout = core_pairs.pair_layout(pair)
        device = pair.target[0].device
        self.rollup = ScopeRollUp(self.layout, device)
        self.sizes = [t.numel() for t in pair.target]
        self.optimizer_vars = core_pairs.optimizer_var_counts(
            self.layout, [id(t) in stepped for t in pair.target]
        )
        self.info: RecordInfo = drift_info(pair, self.layout, attrs)
        self._where = _where(pair, params, device)
        # At a recorded step's start: the recorder's flat copy (read at the
        # end) or, when it lacks a side, both sides copied.
        self._before: torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None = None
        self._at_record: torch.Tensor | None = None
        # Buffers kept between records (fresh ones cost more than the sums on a
        # CPU): t, o, tp, op and the differences d, a, e, b, c, f, in float64.
        # `one_row`: on a CPU each difference is squared as soon as it is made,
        # in one row that stays in the cache (six rows, then one grouped kernel,
        # cost a DQN 256's recorded step 0.1-0.4 ms more, measured); on a GPU one
        # grouped kernel over all six launches once.
        n = sum(self.sizes)
        self.one_row = device.type == "cpu"
        self._values = torch.empty(4, n, dtype=torch.float64, device=device)
        self._diffs = torch.empty(6, n, dtype=torch.float64, device=device)

    def snapshot(self, params_flat: torch.Tensor | None = None) -> None:
        """Both sides now (the start of a recorded step). `params_flat`, the
        recorder's flat copy of every parameter (left untouched until `sums`),
        is kept instead of a second copy when it holds both sides."""
        if params_flat is not None and self._where is not None:
            self._before = params_flat
        else:
            self._before = (flat(self.pair.target), flat(self.pair.online))

    def sums(self, params_flat: torch.Tensor | None = None) -> tuple[torch.Tensor, bool]:
        """([n_scopes, 9] scope sums now, whether a previous record's target was kept);
        keeps the target now for the next record. `params_flat`: as `snapshot`'s, now."""
        values, diffs = self._values, self._diffs
        now, before = values[:2], values[2:]
        self._fill(now, params_flat)
        if isinstance(self._before, torch.Tensor):
            self._fill(before, self._before)
        elif self._before is not None:
            before[0].copy_(self._before[0])
            before[1].copy_(self._before[1])
        else:
            before.copy_(now)
        t, o = now.unbind(0)
        had_record = self._at_record is not None
        # d = t - o, a = t - tp, e = t - op, b = o - tp, c = o - op, f = t - tr
        pairs = [(t, o), (t, before[0]), (t, before[1]), (o, before[0]), (o, before[1])]
        pairs += [(t, self._at_record)] if had_record else []
        if self.one_row:  # each difference squared while its row is in the cache
            squares = torch.cat(
                [sums_of_squares([torch.sub(a, b, out=diffs[0])], self.sizes) for a, b in pairs]
                + [sums_of_squares([o], self.sizes)]
            )
        else:  # every difference, then one grouped kernel
            for k, (a, b) in enumerate(pairs):
                torch.sub(a, b, out=diffs[k])
            squares = sums_of_squares([*diffs[: len(pairs)].unbind(0), o], self.sizes)
        d2, a2, e2, b2, c2 = squares[:5]
        f2 = squares[5] if had_record else torch.zeros_like(d2)
        o2 = squares[-1]
        ab, ce = (a2 + b2 - d2) / 2, (c2 + e2 - d2) / 2
        per_var = torch.stack([d2, o2, a2, ab, b2, c2, ce, e2, f2], dim=1)  # [n_vars, 9]
        if had_record:
            self._at_record.copy_(t)
        else:
            self._at_record = t.clone()
        self._before = None
        return self.rollup.sum(per_var), had_record

    def _fill(self, out: torch.Tensor, params_flat: torch.Tensor | None) -> None:
        """out [2, n] <- the target's and the online's values: from the recorder's
        flat copy when given and it holds them, else from the tensors."""
        for side, tensors in enumerate((self.pair.target, self.pair.online)):
            if params_flat is None or self._where is None:
                out[side].copy_(flat(tensors))
            elif isinstance(self._where[side], slice):
                out[side].copy_(params_flat[self._where[side]])
            else:
                out[side].copy_(params_flat.index_select(0, self._where[side]))


def _where(
    pair: Pair, params: Sequence[torch.Tensor], device: torch.device
) -> tuple[slice | torch.Tensor, slice | torch.Tensor] | None:
    """Where each side's elements lie in the flat copy of `params`: a slice when
    they are one run in order, else an index; None when a tensor is not there."""
    at, runs = 0, {}
    for p in params:
        runs[id(p)] = (at, at + p.numel())
        at += p.numel()
    sides = []
    for tensors in (pair.target, pair.online):
        if not all(id(t) in runs for t in tensors):
            return None
        spans = [runs[id(t)] for t in tensors]
        if all(prev[1] == nxt[0] for prev, nxt in zip(spans, spans[1:])):
            sides.append(slice(spans[0][0], spans[-1][1]))
        else:
            sides.append(torch.cat([torch.arange(*span, device=device) for span in spans]))
    return sides[0], sides[1]


def stepped_ids(optimizers: Sequence[torch.optim.Optimizer]) -> set[int]:
    """id() of every parameter an optimizer steps."""
    return {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
