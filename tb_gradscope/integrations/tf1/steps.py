"""Which TF1 run calls are steps, and which steps are recorded.

A loss's step is the number of earlier `Session.run` calls that included its
train op (0-based, offset by the graph's global step when the session starts,
so a resumed run continues its numbering). Counting per train op means a loop
that alternates `sess.run(train1)` and `sess.run(train2)` records both losses
at the same steps. A loss is recorded at its steps divisible by `every_n_steps`.

Applied updates are measured over an *update window*: it opens before the first
recorded call of step S (a snapshot of the variables) and closes after every
named train op has run once at step S, or before a call that starts another
step. ||delta theta|| of step S is the change across the whole window, so a
scope trained by two train ops at step S shows both updates together.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Collection, Mapping


@dataclasses.dataclass(frozen=True)
class CallPlan:
    """What one run call records.

    Attributes:
      step: the call's step (the smallest step of the train ops it runs).
      close_before: step of an open window to close before the call, or None.
      open_step: step of a window this call opens (snapshot first), or None.
      losses: {loss: step} of the gradient tables fetched with the call.
      close_after: step of the window to close after the call, or None.
    """

    step: int
    close_before: int | None
    open_step: int | None
    losses: Mapping[str, int]
    close_after: int | None


class StepClock:
    """Counts steps per train op and plans what each run call records.

    Args:
      train_op_of: {loss: train-op key or None} for every named loss; a loss
        without a train op is recorded with the window's first call.
      every_n_steps: record steps divisible by this.
    """

    def __init__(self, train_op_of: Mapping[str, str | None], every_n_steps: int):
        if not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(
                f"every_n_steps must be a positive int, got {every_n_steps!r}"
            )
        self._train_op_of = dict(train_op_of)
        self._all_ops = frozenset(k for k in train_op_of.values() if k is not None)
        self._every = every_n_steps
        self._count = {key: 0 for key in self._all_ops}
        self._offset = 0
        self._window: int | None = None
        self._seen: set[str] = set()

    @property
    def open_window(self) -> int | None:
        return self._window

    def set_offset(self, offset: int) -> None:
        """Starts numbering at `offset` (the global step of a resumed run)."""
        self._offset = int(offset)

    def quiet(self, called: Collection[str]) -> int | None:
        """The step of a call that records nothing (no window open, none of
        its train ops at a recorded step), else None. Changes nothing: then
        either `skip` the call or `plan` it."""
        if self._window is not None:
            return None
        every, offset, count = self._every, self._offset, self._count
        steps = [offset + count[key] for key in called]
        return None if any(step % every == 0 for step in steps) else min(steps)

    def skip(self, called: Collection[str]) -> None:
        """Advances the counters of a call `quiet` found recording nothing."""
        for key in called:
            self._count[key] += 1

    def plan(
        self, called: Collection[str], can_record: Callable[[str], bool]
    ) -> CallPlan | None:
        """Advances the counters for a call that runs the train ops `called`.

        `can_record(loss)` says whether the call feeds what the loss needs.
        Returns None for a call that runs no named train op.
        """
        called = frozenset(called) & self._all_ops
        if not called:
            return None
        steps = {key: self._offset + self._count[key] for key in called}
        for key in called:
            self._count[key] += 1
        close_before = None
        if self._window is not None and (
            called & self._seen or any(s != self._window for s in steps.values())
        ):
            close_before = self._window
            self._window, self._seen = None, set()
        losses = {
            loss: steps[key]
            for loss, key in self._train_op_of.items()
            if key in called and steps[key] % self._every == 0 and can_record(loss)
        }
        open_step = None
        if losses and self._window is None:
            open_step = self._window = min(losses.values())
            for loss, key in self._train_op_of.items():
                if key is None and can_record(loss):
                    losses[loss] = open_step
        close_after = None
        if self._window is not None:
            self._seen |= called
            if self._seen >= self._all_ops:
                close_after = self._window
                self._window, self._seen = None, set()
        return CallPlan(min(steps.values()), close_before, open_step, losses, close_after)

    def close(self) -> int | None:
        """Closes the open window (end of training); returns its step or None."""
        step, self._window, self._seen = self._window, None, set()
        return step
