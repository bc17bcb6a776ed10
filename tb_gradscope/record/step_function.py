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

The host knows the step without reading the counter at most steps: it keeps
a Python int (`RecorderState.host_step`), advanced after each call by the
number of counter advances the variant's trace saw (the variants return only
what `fn` returns). It reads the counter instead (one host read) at the first
call, which traces `recorded` whatever it runs (that trace analyzes the step
and checks the rules before any step runs), before every call that records
something (`recorded` has no in-graph gate, and `drift` and `snapshot` must
run at the step they were picked for), and whenever the count may be wrong:

- the recorder moved the step eagerly (`apply`, `advance` or a block outside
  the wrapper): `RecorderState.advanced` forgets the count;
- a trace saw an advance the host cannot count: under a `tf.cond` or a
  `tf.while_loop`, inside a nested `tf.function`, under tf.distribute, or a
  variant traced twice with different counts; or any traced function that is
  not a wrapper's variant advances the step (its calls are not the host's to
  see): the wrapper then reads the counter at every call;
- the call raised: the step may or may not have moved.

What the host cannot see is a change made behind the recorder's back between
calls: an assign to `rec.step` or a checkpoint restore. Such a change is found
at the next call the count says records something (at most `every_n_steps`
calls later); the calls before it ran as picked for the old count, and the
wrapper warns once if one of them was due to record.

The variant a recorder call belongs to is the graph being traced: its own, or a
`tf.cond`/`tf.while_loop` branch of it. A `tf.function` nested inside the step is
traced once for all variants (TF caches it by signature), so recorder calls in
it always record as the one-trace path does.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import weakref
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.ops.control_flow_v2_func_graphs import ControlFlowFuncGraph

from tb_gradscope.record.warn import warn_once

PLAIN, SNAPSHOT, DRIFT, RECORDED = "plain", "snapshot", "drift", "recorded"


@dataclasses.dataclass
class Trace:
    """What one trace of a variant saw: how many counter advances, and whether
    the host can count them (every one in the variant's own graph, none under
    control flow, in a nested function or under tf.distribute)."""

    advances: int = 0
    countable: bool = True


class Variants:
    """Which graphs are being traced as which variant (per recorder)."""

    def __init__(self) -> None:
        self._modes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._trace: Trace | None = None  # the variant being traced
        self._offsets: set[int] = set()  # advances traced before `record_drift`, over every variant's trace
        self.foreign = False  # a traced function that is not a variant advances the step

    @contextlib.contextmanager
    def tracing(self, mode: str) -> Iterator[Trace]:
        """Marks the graph being traced (the variant's FuncGraph) as `mode`;
        yields what the trace sees of the step's advances."""
        graph = tf.compat.v1.get_default_graph()
        self._modes[graph] = mode
        self._trace = trace = Trace()
        try:
            yield trace
        finally:
            self._modes.pop(graph, None)
            self._trace = None

    def note_advance(self) -> None:
        """The step's counter advance is being traced (by `apply`, `advance` or
        a `training_step()` block's exit)."""
        trace = self._trace
        if trace is None:
            self.foreign = True
            return
        trace.advances += 1
        graph = tf.compat.v1.get_default_graph()
        if graph not in self._modes or tf.distribute.has_strategy():
            trace.countable = False  # a branch, a nested function: not one advance per call

    def note_drift(self) -> int | None:
        """`record_drift` is being traced: it sees the counter after this many
        advances (returned; None outside a variant)."""
        if self._trace is not None:
            self._offsets.add(self._trace.advances)
            return self._trace.advances
        return None

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
        self._advances: dict[str, int] = {}  # counter advances per call of each variant, learned when traced
        self._countable = True  # whether every trace's advances can be counted on the host
        self._traced_first = False
        self._unread = 0  # calls run on the host's count since the counter was last read
        functools.update_wrapper(self, fn)

    def _traced(self, mode: str) -> Callable[..., Any]:
        recorder, fn = self._recorder, self._fn

        def variant(*args: Any, **kwargs: Any) -> Any:
            with recorder._s.variants.tracing(mode) as trace:  # noqa: SLF001
                out = fn(*args, **kwargs)
            self._learn(mode, trace)
            return out

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

    def _learn(self, mode: str, trace: Trace) -> None:
        """Keeps what a trace of `mode` saw of the step's advances."""
        known = self._advances.setdefault(mode, trace.advances)
        if not trace.countable or known != trace.advances:
            self._countable = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        recorder = self._recorder
        state = recorder._s  # noqa: SLF001
        if not self._traced_first:
            # The first call traces the recorded variant, which analyzes the
            # step and checks the rules, even when it does not run it.
            self._variants[RECORDED].get_concrete_function(*args, **kwargs)
            self._traced_first = True
        step = state.host_step
        counting = self._countable and not state.variants.foreign
        mode = None
        if step is not None and counting:
            mode = PLAIN if state.disabled else recorder.due_at(step)
        if mode != PLAIN:  # records something, or the count is unknown: read the counter
            read = int(recorder.step.numpy())
            if step is not None and read != step and not state.disabled:
                self._moved_outside(step, read)
            if mode is None or read != step:
                mode = PLAIN if state.disabled else recorder.due_at(read)
            step, self._unread = read, 0
        state.host_step = None  # unknown until the call returns
        out = self._variants[mode](*args, **kwargs)
        if counting and self._countable:  # (a trace in this call may have said otherwise)
            state.host_step = step + self._advances[mode]
            self._unread += 1
        return out

    def _moved_outside(self, counted: int, read: int) -> None:
        """The step counter changed behind the recorder's back: the calls since
        it was last read ran as picked for the host's count; say so if one of
        them, taken as the steps just before `read`, was due to record."""
        ran = range(read - min(self._unread, self._recorder._s.every), read)  # noqa: SLF001
        if all(self._recorder.due_at(s) == PLAIN for s in ran):
            return
        warn_once(
            (id(self._recorder), "step_moved"),
            f"Recorder '{self._recorder.name}': its step changed outside the wrapped step "
            f"(counted {counted}, read {read}: a checkpoint restore or an assign between calls); "
            f"the {len(ran)} call(s) before ran as picked for the old count, so a due step "
            f"ran unrecorded. Later steps are recorded as usual",
        )
