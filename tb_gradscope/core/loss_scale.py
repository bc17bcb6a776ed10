"""Steps a loss scaler skipped, as SKIPPED events: one builder for every recorder.

A loss scaler (Keras's LossScaleOptimizer, torch's GradScaler) multiplies the
loss by a dynamic scale, divides the gradients by it when applying, and skips
the update when a gradient is not finite (then lowers the scale). A recorded
step it skipped is written as a SKIPPED event in the EVENTS record
`SKIPPED_RECORD`, not as tables of infinite norms (docs/FORMAT.md).
"""

from __future__ import annotations

from tb_gradscope.format.events import SKIPPED, Event

OVERFLOW = "loss_scale_overflow"  # the SKIPPED event's name
SKIPPED_RECORD = "skipped"  # the EVENTS record that holds SKIPPED events


def skipped_event(step: int, scale: float, skipped: int = 1, backoff: float = 0.5) -> Event:
    """The SKIPPED event of `skipped` batches that overflowed, the last at loss
    scale `scale`; `backoff`: the factor the scaler then multiplied its scale by."""
    if skipped == 1:
        what = f"step skipped by the loss scaler: non-finite gradients at loss scale {scale:g}"
    else:
        what = (
            f"step skipped {skipped} times by the loss scaler: non-finite gradients, "
            f"the last time at loss scale {scale:g}"
        )
    lowered = "halved the scale" if backoff == 0.5 else f"multiplied the scale by {backoff:g}"
    return Event(
        type=SKIPPED,
        name=OVERFLOW,
        step=step,
        message=f"{what}; the optimizer applied no update and {lowered}",
        evidence={"loss_scale": scale, "skipped_batches": skipped},
    )
