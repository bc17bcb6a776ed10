"""`Recorder.function`: a training step traced as separate variants, picked on the host by step.

A step traced once (plain `tf.function`) decides in the graph, at every step,
whether to record: a read of the step counter, a floormod and a branch op per
recording call, which an unrecorded step pays too (~45 µs on a 0.5 ms DQN step).
`Recorder.function(fn)` traces `fn` up to four times instead:

- `recorded`: the one-trace graph, traced knowing that gradient stats are due
  (no in-graph gate on them; a pair's drift after `apply` is still gated in
  the graph), run at recorded steps;
- `plain`: every recorder call passes through (`rec.gradients` is
  `tape.gradient` of the losses' sum, `rec.apply` is `apply_gradients` and the
  step's `assign_add`, `rec.record_drift()` does nothing): the user's own graph,
  run at steps where nothing is due;
- `drift`: `plain` whose `record_drift()` records, run where only a pair's
  drift is due (after `apply`, `record_drift` sees the next step);
- `snapshot`: `plain` whose `record_drift()` copies the pairs' variables, run at
  the step before a drift step (drift compares a step with the one before).

The host knows the step without reading the counter at most steps: every
variant returns the counter's value before and after the step, so the wrapper
keeps count. `recorded` is traced knowing it runs at a recorded step: its
recording has no in-graph gate (no step read, floormod or branch op per
record), so the wrapper reads the counter on the host before running it (at
recorded steps only, and at the first call, which traces `recorded` whatever
it runs: that trace analyzes the step and checks the rules before any step
runs). When the counter changed outside the wrapped step (an assign, a
checkpoint restore), the next call sees it in the value it returns (or the
read); the wrapper warns once if a step that was due ran unrecorded, and keeps
count from the value read.

The variant a recorder call belongs to is the graph being traced: its own, or a
`tf.cond`/`tf.while_loop` branch of it. A `tf.function` nested inside the step is
traced once for all variants (TF caches it by signature), so recorder calls in
it always record as the one-trace path does.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.ops.control_flow_v2_func_graphs import ControlFlowFuncGraph

from tb_gradscope.record.warn import warn_once

PLAIN, SNAPSHOT, DRIFT, RECORDED = "plain", "snapshot", "drift", "recorded"


class Variants:
    """Which graphs are being traced as which variant (per recorder)."""

    def __init__(self) -> None:
        self._modes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._advances: int | None = None  # step advances traced so far in the variant being traced
        self._offsets: set[int] = set()  # advances traced before `record_drift`, over every variant's trace

    @contextlib.contextmanager
    def tracing(self, mode: str) -> Iterator[None]:
        """Marks the graph being traced (the variant's FuncGraph) as `mode`."""
        graph = tf.compat.v1.get_default_graph()
        self._modes[graph] = mode
        self._advances = 0
        try:
            yield
        finally:
            self._modes.pop(graph, None)
            self._advances = None

    def note_advance(self) -> None:
        """The step's counter advance is being traced (by `apply`, `advance` or
        a `training_step()` block's exit)."""
        if self._advances is not None:
            self._advances += 1

    def note_drift(self) -> int | None:
        """`record_drift` is being traced: it sees the counter after this many
        advances (returned; None outside a variant)."""
        if self._advances is not None:
            self._offsets.add(self._advances)
        return self._advances

    def drift_offset(self) -> int | None:
        """By how much the step `record_drift` sees exceeds the step a call
        starts at (1 after `apply`, 0 inside a `training_step()` block), when
        every traced variant agrees; None before any was traced."""
        return next(iter(self._offsets)) if len(self._offsets) == 1 else None

    def mode(self) -> str | None:
        """PLAIN, SNAPSHOT or DRIFT inside such a variant's graph (or a
        control-flow branch of it); None everywhere else, where the recorder
        records."""
        mode = self._traced_as()
        return None if mode == RECORDED else mode

    def recorded(self) -> bool:
        """Whether the graph being traced is a `recorded` variant (or a
        control-flow branch of it), which the host runs only at recorded steps:
        its recording needs no in-graph gate. Not under tf.distribute, whose
        replicas keep the one-trace gating."""
        return self._traced_as() == RECORDED and not tf.distribute.has_strategy()

    def _traced_as(self) -> str | None:
        if not self._modes or tf.executing_eagerly():
            return None
        graph = tf.compat.v1.get_default_graph()
        while graph is not None:
            mode = self._modes.get(graph)
            if mode is not None:
                return mode
            if not isinstance(graph, ControlFlowFuncGraph):
                return None
            graph = getattr(graph, "outer_graph", None)
        return None


def variant_due(state: Any, step: int) -> str:
    """The variant a step starting at `step` runs (see `Recorder.due_at`)."""
    monitor = state.monitor
    if step % state.every == 0:
        return RECORDED
    if monitor is None:
        return PLAIN
    seen = state.variants.drift_offset()
    if seen is not None:  # record_drift sees `step + seen` (learned when the step was traced)
        if monitor.due_at(step + seen):
            return DRIFT
        return SNAPSHOT if monitor.due_at(step + seen + 1) else PLAIN
    if monitor.due_at(step) or monitor.due_at(step + 1):
        return DRIFT
    if monitor.due_at(step + 2):
        return SNAPSHOT
    return PLAIN


class StepFunction:
    """A training step whose unrecorded steps run the user's plain graph.

    Made by `Recorder.function(fn, **tf_function_kwargs)`; call it as `fn`.
    """

    def __init__(self, recorder: Any, fn: Callable[..., Any], tf_function_kwargs: dict):
        self._recorder = recorder
        self._fn = fn
        self._variants = {
            mode: tf.function(self._traced(mode), **tf_function_kwargs) for mode in (PLAIN, SNAPSHOT, DRIFT, RECORDED)
        }
        self._next: int | None = None  # the step the next call runs at, as far as the host knows
        self._moves = recorder._s.eager_moves  # noqa: SLF001 - the recorder's own count of eager step moves
        functools.update_wrapper(self, fn)

    def _traced(self, mode: str) -> Callable[..., Any]:
        recorder, fn = self._recorder, self._fn

        def variant(*args: Any, **kwargs: Any) -> tuple[Any, tf.Tensor, tf.Tensor]:
            with recorder._s.variants.tracing(mode):  # noqa: SLF001
                before = recorder.step.read_value()
                out = fn(*args, **kwargs)
                return out, before, recorder.step.read_value()

        # fn's signature, so the graph's inputs keep the user's argument names
        # (the FlowGraph shows them); no __wrapped__, through which TF would
        # count the variants' traces as retraces of one function.
        functools.update_wrapper(variant, fn)
        del variant.__wrapped__
        variant.__signature__ = inspect.signature(fn)
        variant.__name__ = f"{getattr(fn, '__name__', 'step')}_{mode}"
        # TF counts retraces per code object: one of its own per variant.
        variant.__code__ = variant.__code__.replace(co_name=variant.__name__)
        return variant

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        recorder = self._recorder
        state = recorder._s  # noqa: SLF001
        if state.eager_moves != self._moves:  # the recorder moved the step eagerly since
            self._moves, self._next = state.eager_moves, None
        expected = self._next
        first = expected is None
        if first or (not state.disabled and recorder.due_at(expected) == RECORDED):
            # The recorded variant records without an in-graph gate: run it only
            # at a step read on the host (a read at recorded steps only).
            expected = int(recorder.step.numpy())
        if first:
            # The first call traces the recorded variant, which analyzes the
            # step and checks the rules, even when it does not run it.
            self._variants[RECORDED].get_concrete_function(*args, **kwargs)
        mode = PLAIN if state.disabled else recorder.due_at(expected)
        out, before, after = self._variants[mode](*args, **kwargs)
        ran = int(before)
        if ran != expected:
            self._moved_outside(expected, ran, mode)
        self._next = int(after)
        return out

    def _moved_outside(self, expected: int, ran: int, mode: str) -> None:
        """The step counter changed between calls: this call ran as `mode`
        chose for `expected`; say so if `ran` was due for more."""
        order = (PLAIN, SNAPSHOT, DRIFT, RECORDED)
        if order.index(mode) >= order.index(self._recorder.due_at(ran)):
            return
        warn_once(
            (id(self._recorder), "step_moved"),
            f"Recorder '{self._recorder.name}': its step changed outside the wrapped step "
            f"(expected {expected}, ran {ran}: a checkpoint restore or an assign between calls); "
            f"step {ran} ran unrecorded. Later steps are recorded as usual",
        )
