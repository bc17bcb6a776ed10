"""Mixed precision with `torch.amp.GradScaler`: unscaled norms and skipped steps.

The loop hands `rec.backward` the scaled loss (`scaler.scale(loss)`), so the
gradients the recorder sees carry the scale. Each backward's GRAD_STATS table
is divided by the scale in effect at that backward (l2 and max |g|; the scale
is a power of two, so the division is exact), on the host: the scale is taken
as `scaler.scale(one)`, a device tensor (`get_scale()` would read it to the
host at once), before `scaler.update()` changes it in place, and moves with
the step's other figures. A recorded step whose
gradients are not finite is one the scaler skips (`scaler.step` then does not
call `optimizer.step()`): it is written as a SKIPPED event
(`core.loss_scale`), not as tables of infinite norms, as the TF recorders do.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from tb_gradscope import format as fmt
from tb_gradscope.core.loss_scale import SKIPPED_RECORD, skipped_event
from tb_gradscope.format.metadata import KIND_SPECS

_COLUMNS = KIND_SPECS[fmt.Kind.GRAD_STATS].columns
_L2, _MAX_ABS, _NONFINITE = (_COLUMNS.index(c) for c in ("l2", "max_abs", "nonfinite"))


class LossScale:
    """The GradScaler whose scale multiplies the losses handed to the recorder."""

    def __init__(self, scaler: Any):
        if not isinstance(scaler, torch.amp.GradScaler):
            raise TypeError(
                f"grad_scaler is a {type(scaler).__name__}; pass the torch.amp.GradScaler "
                "whose scale() scales the losses you hand rec.backward"
            )
        self.scaler = scaler

    def current(self, device: torch.device) -> torch.Tensor | None:
        """The scale now, as a float32 device tensor of its own; None when the
        scaler is disabled (it scales nothing)."""
        if not self.scaler.is_enabled():
            return None
        return self.scaler.scale(torch.ones((), dtype=torch.float32, device=device))

    def skipped(self, step: int, scale: float) -> tuple[fmt.RecordInfo, list[dict]]:
        """The EVENTS record and document of a recorded step the scaler skipped."""
        event = skipped_event(step, scale, backoff=self.scaler.get_backoff_factor())
        return fmt.make_info(fmt.Kind.EVENTS, SKIPPED_RECORD), [event.to_json()]


def unscaled(table: np.ndarray, scale: float) -> np.ndarray:
    """A GRAD_STATS table [..., 5] of scaled gradients as the unscaled gradients' table."""
    table = np.array(table, np.float64)
    for c in (_L2, _MAX_ABS):  # the columns that scale with the gradient
        table[..., c] /= scale
    return table


def overflowed(tables: Iterable[np.ndarray]) -> bool:
    """Whether any GRAD_STATS table (host) counts a non-finite gradient value."""
    return any(float(np.sum(t[..., _NONFINITE])) > 0 for t in tables)
