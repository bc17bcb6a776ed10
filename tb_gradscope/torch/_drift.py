"""A pair's drift at a recorded step, on the device: snapshots and the nine sums.

At the start of a recorded step the recorder snapshots both sides of every
pair (tp, op: their values at the end of the step before); at its end it
takes the sums of `core.drift.SUMS` per tensor (one float64 cumulative sum
for all nine), rolls them up to the pair's target scopes, and hands them to
the host with the step's other tables; `core.drift.drift_table` makes the
DRIFT columns there. The target at the pair's previous record (tr) is kept
for `target_moved`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from tb_gradscope.core import pairs as core_pairs
from tb_gradscope.core.pairs import Pair
from tb_gradscope.core.tables import drift_info
from tb_gradscope.format import RecordInfo
from tb_gradscope.torch._stats import ScopeRollUp, flat, segment_sums


class PairDrift:
    """One pair's drift: its layout, its snapshots and its sums at a step's end."""

    def __init__(self, pair: Pair, stepped: set[int], attrs: dict):
        self.pair = pair
        self.layout = core_pairs.pair_layout(pair)
        device = pair.target[0].device
        self.rollup = ScopeRollUp(self.layout, device)
        self.sizes = [t.numel() for t in pair.target]
        self.optimizer_vars = core_pairs.optimizer_var_counts(
            self.layout, [id(t) in stepped for t in pair.target]
        )
        self.info: RecordInfo = drift_info(pair, self.layout, attrs)
        self._before: tuple[torch.Tensor, torch.Tensor] | None = None
        self._at_record: torch.Tensor | None = None

    def snapshot(self) -> None:
        """Both sides now (the start of a recorded step)."""
        self._before = (
            flat(self.pair.target, torch.float64),
            flat(self.pair.online, torch.float64),
        )

    def sums(self) -> tuple[torch.Tensor, bool]:
        """([n_scopes, 9] scope sums now, whether a previous record's target was kept);
        keeps the target now for the next record."""
        t = flat(self.pair.target, torch.float64)
        o = flat(self.pair.online, torch.float64)
        tp, op = self._before if self._before is not None else (t, o)
        tr = self._at_record
        d, a, b, c, e = t - o, t - tp, o - tp, o - op, t - op
        f = t - tr if tr is not None else torch.zeros_like(t)
        products = torch.stack([d * d, o * o, a * a, a * b, b * b, c * c, c * e, e * e, f * f])
        per_var = segment_sums(products, self.sizes).T  # [n_vars, 9]
        had_record = tr is not None
        self._at_record, self._before = t, None
        return self.rollup.sum(per_var), had_record


def stepped_ids(optimizers: Sequence[torch.optim.Optimizer]) -> set[int]:
    """id() of every parameter an optimizer steps."""
    return {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
