"""Which TF1 run calls are steps, and which steps are recorded.

A loss's step is the number of earlier `Session.run` calls that included its
train op (0-based, offset by the graph's global step when the session starts,
so a resumed run continues its numbering). Counting per train op means a loop
that alternates `sess.run(train1)` and `sess.run(train2)` records both losses
at the same steps, and so does a loop that runs its train ops in blocks (a
PPO: K calls of the actor's op, then K of the critic's): step s is each op's
s-th call. A loss is recorded at its steps divisible by `every_n_steps`.

Applied updates are measured over an *update window* per recorded step S: it
opens before the first recorded call of step S and closes after every named
train op has run once at step S. ||delta theta|| of step S is the sum of the
updates of its calls, so a scope trained by two train ops at step S shows both
updates together. When calls of other steps run between two calls of step S
(train ops in blocks), the window is *paused*: the update so far goes into an
accumulator slot (`slots` of them) and the window resumes with a fresh
snapshot before its next call, so those other calls are not counted. A window
that must pause with every slot taken is closed early (`Close.early`): its
||delta theta|| then covers only the calls run so far, and the train ops that
had not run at that step yet (`Close.unmeasured`) leave the update of what
they write unmeasured. Each step opens at most one window, so there is one
UPDATE record per step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping


@dataclasses.dataclass(frozen=True)
class Close:
    """A window to close: its step, its accumulator slot (None: never paused),
    whether it is running (its snapshot is of this stretch of calls), whether
    it closes before every train op ran at its step and, if so, the train ops
    still to run at that step (their updates are not measured)."""

    step: int
    slot: int | None
    running: bool
    early: bool = False
    unmeasured: frozenset = frozenset()


@dataclasses.dataclass(frozen=True)
class Pause:
    """The running window's update so far, to add to accumulator `slot`
    (`first`: the slot is empty, assign instead of add)."""

    step: int
    slot: int
    first: bool


@dataclasses.dataclass(frozen=True)
class CallPlan:
    """What one run call records.

    Attributes:
      step: the call's step (the smallest step of the train ops it runs).
      closes: windows to close before the call (paused with no slot free).
      pause: the running window to pause before the call, or None.
      snapshot: take the snapshot before the call (its window opens or resumes).
      open_step: step of a window this call opens, or None.
      losses: {loss: step} of the gradient tables fetched with the call.
      close_after: the window to close after the call, or None.
    """

    step: int
    closes: tuple[Close, ...]
    pause: Pause | None
    snapshot: bool
    open_step: int | None
    losses: Mapping[str, int]
    close_after: Close | None


@dataclasses.dataclass
class _Window:
    seen: set
    slot: int | None = None


class StepClock:
    """Counts steps per train op and plans what each run call records.

    Args:
      train_op_of: {loss: train-op key or None} for every named loss; a loss
        without a train op is recorded with the window's first call.
      every_n_steps: record steps divisible by this.
      slots: accumulator slots for paused windows (see the module docstring).
    """

    def __init__(self, train_op_of: Mapping[str, str | None], every_n_steps: int, slots: int = 0):
        if not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"every_n_steps must be a positive int, got {every_n_steps!r}")
        self._train_op_of = dict(train_op_of)
        self._all_ops = frozenset(k for k in train_op_of.values() if k is not None)
        self._every = every_n_steps
        self._count = {key: 0 for key in self._all_ops}
        self._offset = 0
        self._windows: dict[int, _Window] = {}
        self._running: int | None = None
        self._free = list(range(slots))
        self._last_opened: int | None = None

    @property
    def has_open_window(self) -> bool:
        return bool(self._windows)

    def set_offset(self, offset: int) -> None:
        """Starts numbering at `offset` (the global step of a resumed run)."""
        self._offset = int(offset)

    def quiet(self, called: Collection[str]) -> int | None:
        """The step of a call that records nothing (no window open, none of
        its train ops at a recorded step), else None. Changes nothing: then
        either `skip` the call or `plan` it."""
        if self._windows:
            return None
        every, offset, count = self._every, self._offset, self._count
        steps = [offset + count[key] for key in called]
        return None if any(step % every == 0 for step in steps) else min(steps)

    def skip(self, called: Collection[str]) -> None:
        """Advances the counters of a call `quiet` found recording nothing."""
        for key in called:
            self._count[key] += 1

    def plan(self, called: Collection[str], can_record: Callable[[str], bool]) -> CallPlan | None:
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
        losses = {
            loss: steps[key]
            for loss, key in self._train_op_of.items()
            if key in called and steps[key] % self._every == 0 and can_record(loss)
        }
        window = min((s for s in self._windows if s in steps.values()), default=None)
        open_step = None
        if window is None and losses:
            first = min(losses.values())
            if self._last_opened is None or first > self._last_opened:
                open_step = window = self._last_opened = first
                self._windows[first] = _Window(set())
                for loss, key in self._train_op_of.items():
                    if key is None and can_record(loss):
                        losses[loss] = first
        closes: list[Close] = []
        pause = None
        if self._running is not None and self._running != window:
            pause = self._pause(closes)
        snapshot = window is not None and self._running != window
        if window is not None:
            self._running = window
        close_after = None
        if window is not None:
            state = self._windows[window]
            state.seen |= called
            if state.seen >= self._all_ops:
                close_after = self._close(window, running=True)
        return CallPlan(
            min(steps.values()), tuple(closes), pause, snapshot, open_step, losses, close_after
        )

    def close(self) -> list[Close]:
        """Closes every open window (end of training), in step order."""
        return [self._close(step, running=step == self._running) for step in sorted(self._windows)]

    def _pause(self, closes: list[Close]) -> Pause | None:
        """Pauses the running window; closes it instead when no slot is free."""
        step, self._running = self._running, None
        state = self._windows[step]
        if state.slot is not None:
            return Pause(step, state.slot, first=False)
        if self._free:
            state.slot = self._free.pop(0)
            return Pause(step, state.slot, first=True)
        self._running = step
        closes.append(self._close(step, running=True, early=True))
        return None

    def _close(self, step: int, running: bool, early: bool = False) -> Close:
        state = self._windows.pop(step)
        if self._running == step:
            self._running = None
        if state.slot is not None:
            self._free.append(state.slot)
            self._free.sort()
        unmeasured = self._all_ops - state.seen if early else frozenset()
        return Close(step, state.slot, running, early, frozenset(unmeasured))
