"""`Recorder.function`: a training step traced as separate variants, picked on the host by step.

A step traced once (plain `tf.function`) decides in the graph, at every step,
whether to record: a read of the step counter, a floormod and a branch op per
recording call, which an unrecorded step pays too (~45 µs on a 0.5 ms DQN step).
`Recorder.function(fn)` traces `fn` twice instead:

- `recorded`: the one-trace graph, traced knowing that it records (no
  in-graph gate on the gradient stats, the update or the pairs' drift), run at
  recorded steps: one call per recording period does all of a period's work;
- `plain`: every recorder call passes through (`rec.gradients` is
  `tape.gradient` of the losses' sum, `rec.apply` is `apply_gradients` and the
  step's `assign_add`, `rec.record_drift()` does nothing): the user's own graph,
  run at every other step.

Drift compares the pairs after the step with the step before: `recorded`
reads the pairs' variables at the start of the call (`Trace.before`), so no
earlier call has to copy them (a read that nothing uses is pruned), and the
pairs are recorded in the call that records gradients, labelled with that
call's step as its gradients are.

The host knows the step without reading the counter: it keeps a Python int
(`RecorderState.host_step`), advanced after each call by the number of counter
advances the variant's trace saw, and picks the variant by it (`step %
every_n_steps`). A variant that records returns, beside what `fn`
returns, the step it began at, which the host checks against its count after
the call (reading the counter before a call costs more than a small step's
recording: an eager op right after a function call, ~0.2 ms of CPU). It also
returns how many records its one write queued, which the host counts towards
the next flush, and the rules' gate test and tables, which the host checks
(`Variants.defer`): no flush gate and no host callback inside the step. It reads
the counter before a call at the first call, which traces `recorded` whatever
it runs (that trace analyzes the step and checks the rules before any step
runs), and whenever the count may be wrong:

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
after the next call the count says records something (at most `every_n_steps`
calls later); the calls until then ran as picked for the old count (that one
too: it may record at a step off the schedule, under the step's true number),
and the wrapper warns once if that left a due step unrecorded or recorded one
off schedule.

A watched step (`Recorder.watch`, `late=True`) has a third variant, `late`:
the one-trace graph, its losses gated in the graph by their due steps
(`RecorderState._due`), the recorded variables copied at its block's entry
and its step's tables written where a loss was recorded in it. Its recorded
variant moves each loss it records to its next due step and returns the due
steps with what it tells the host; when a loss is then overdue (computed only
off the recording steps: TD3's delayed actor on odd calls), the host runs the
next calls as `late` until it is recorded, so it is recorded at its first
computation at or after the recording step, as the explicit form records it.
Calls at no recording step and with no loss overdue stay `plain`. A loss is
chased for one period after its due step at most: one computed less often
than every `every_n_steps` calls (or no longer) is then recorded only where a
recording call computes it, and costs no late calls after that period.

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
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.core.warn import warn_once
from tb_gradscope.record import _op_scope as op_scope
from tb_gradscope.record._context import ExecutionContext

PLAIN, RECORDED, LATE = "plain", "recorded", "late"


@dataclasses.dataclass
class Trace:
    """What one trace of a variant saw: how many counter advances, and whether
    the host can count them (every one in the variant's own graph, none under
    control flow, in a nested function or under tf.distribute)."""

    advances: int = 0
    countable: bool = True
    host: list = dataclasses.field(
        default_factory=list
    )  # (callback, tensors) to run after each call (`defer`)
    started: tf.Tensor | None = None  # the step the call began at
    before: tf.Tensor | None = (
        None  # the pairs' sides read at the start of the call (`DriftMonitor.read_sides`)
    )
    marks_due: bool = False  # a recorded variant that moves the losses' due steps (`late`)
    due_at_start: tf.Tensor | None = None  # a late variant: the due steps at the call's start


class Variants:
    """Which graphs are being traced as which variant (per recorder)."""

    def __init__(self) -> None:
        self._modes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._trace: Trace | None = None  # the variant being traced
        # function graph being traced -> the step's advances traced in it so far
        self._advances: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.foreign = False  # a traced function that is not a variant advances the step

    @contextlib.contextmanager
    def tracing(
        self,
        mode: str,
        started: tf.Tensor | None = None,
        before: tf.Tensor | None = None,
        marks_due: bool = False,
        due_at_start: tf.Tensor | None = None,
    ) -> Iterator[Trace]:
        """Marks the graph being traced (the variant's FuncGraph) as `mode`;
        yields what the trace sees of the step's advances. `started`, `before`:
        the step and the pairs' values read at the start of the call;
        `marks_due`, `due_at_start`: see `Trace`."""
        graph = tf.compat.v1.get_default_graph()
        self._modes[graph] = mode
        self._trace = trace = Trace(
            started=started, before=before, marks_due=marks_due, due_at_start=due_at_start
        )
        try:
            yield trace
        finally:
            self._modes.pop(graph, None)
            self._trace = None

    def note_advance(self, ctx: ExecutionContext) -> None:
        """The step's counter advance is being traced (by `apply`, `advance` or
        a `training_step()` block's exit)."""
        graph = _function_graph(tf.compat.v1.get_default_graph())
        self._advances[graph] = self._advances.get(graph, 0) + 1
        trace = self._trace
        if trace is None:
            self.foreign = True
            return
        trace.advances += 1
        graph = tf.compat.v1.get_default_graph()
        if graph not in self._modes or ctx.distributed:
            trace.countable = False  # a branch, a nested function: not one advance per call

    def defer(
        self, callback: Callable[..., None], tensors: Sequence[tf.Tensor], ctx: ExecutionContext
    ) -> bool:
        """Hands `callback(*values of tensors)` to the host, to run after each
        call of the recorded variant being traced: only from the variant's own
        graph (not a branch, a nested function or under tf.distribute), whose
        outputs they can be. False where it cannot."""
        trace = self._trace
        graph = tf.compat.v1.get_default_graph()
        if trace is None or self._modes.get(graph) != RECORDED or ctx.distributed:
            return False
        trace.host.append((callback, list(tensors)))
        return True

    def recorded_every_call(self, ctx: ExecutionContext) -> bool:
        """Whether the graph being traced runs only at steps that record: a
        `recorded` variant's own graph whose advances the host counts, not
        under tf.distribute (whose replicas keep the in-graph gate)."""
        trace = self._trace
        return trace is not None and trace.countable and self.recorded(ctx)

    def advances_traced(self) -> int:
        """How far the step a recorder call traced now sees is past the step the
        traced function began at: the advances traced before it in that
        function (1 after `apply`, 0 inside a `training_step()` block)."""
        return self._advances.get(_function_graph(tf.compat.v1.get_default_graph()), 0)

    def before(self, ctx: ExecutionContext) -> tuple[tf.Tensor, tf.Tensor, int] | None:
        """(the step and the pairs' values at the start of the call, the
        advances traced since) for a `record_drift` traced in a variant that
        records (or a control-flow branch of it); None elsewhere."""
        trace = self._trace
        if trace is None or trace.before is None or self._traced_as(ctx) in (None, PLAIN):
            return None
        return trace.started, trace.before, trace.advances

    def mode(self, ctx: ExecutionContext) -> str | None:
        """PLAIN inside such a variant's graph (or a control-flow branch of
        it); None everywhere else, where the recorder records."""
        mode = self._traced_as(ctx)
        return None if mode in (RECORDED, LATE) else mode

    def marks_due(self, ctx: ExecutionContext) -> bool:
        """Whether the recorded variant being traced moves each loss it records
        to its next due step (a watched step's: the host then knows which
        losses are overdue, `StepFunction`)."""
        trace = self._trace
        return trace is not None and trace.marks_due and self.recorded(ctx)

    def due_at_start(self, ctx: ExecutionContext) -> tf.Tensor | None:
        """In a late variant's own graph: the losses' due steps at the call's
        start (a loss recorded in the call has moved its own); else None."""
        trace = self._trace
        graph = tf.compat.v1.get_default_graph()
        if trace is None or ctx.distributed or self._modes.get(graph) != LATE:
            return None
        return trace.due_at_start

    def recorded(self, ctx: ExecutionContext) -> bool:
        """Whether the graph being traced is a `recorded` variant (or a
        control-flow branch of it), which the host runs only at recorded steps:
        its recording needs no in-graph gate. Not under tf.distribute, whose
        replicas keep the one-trace gating."""
        return self._traced_as(ctx) == RECORDED and not ctx.distributed

    def _traced_as(self, ctx: ExecutionContext) -> str | None:
        if not self._modes or ctx.eager:
            return None
        graph = tf.compat.v1.get_default_graph()
        while graph is not None:
            mode = self._modes.get(graph)
            if mode is not None:
                return mode
            if not private.is_control_flow_graph(graph):
                return None
            graph = getattr(graph, "outer_graph", None)
        return None


def _function_graph(graph: Any) -> Any:
    """The function graph whose trace `graph` belongs to: itself, or the
    graph a control-flow branch is nested in."""
    while private.is_control_flow_graph(graph) and getattr(graph, "outer_graph", None) is not None:
        graph = graph.outer_graph
    return graph


def variant_due(state: Any, step: int) -> str:
    """The variant a step starting at `step` runs (see `Recorder.due_at`)."""
    return RECORDED if step % state.every == 0 else PLAIN


class StepFunction:
    """A training step whose unrecorded steps run the user's plain graph.

    Made by `Recorder.function(fn, **tf_function_kwargs)`; call it as `fn`.
    """

    def __init__(
        self,
        recorder: Any,
        fn: Callable[..., Any],
        tf_function_kwargs: dict,
        late: bool = False,
    ):
        self._recorder = recorder
        self._fn = fn
        self._late = late  # records a loss overdue after a recording step late (`LATE`)
        self._overdue = False  # a loss is overdue: the next call runs `late`
        modes = (PLAIN, RECORDED, LATE) if late else (PLAIN, RECORDED)
        self._variants = {
            mode: tf.function(self._traced(mode), **tf_function_kwargs) for mode in modes
        }
        self._advances: dict[
            str, int
        ] = {}  # counter advances per call of each variant, learned when traced
        self._countable = True  # whether every trace's advances can be counted on the host
        self._traced_first = False
        self._unread = 0  # calls run on the host's count since it was last checked
        self._host_calls: list[
            list[Callable[..., None]]
        ] = []  # per trace of a variant: its `Variants.defer` callbacks
        functools.update_wrapper(self, fn)

    def _traced(self, mode: str) -> Callable[..., Any]:
        recorder, fn = self._recorder, self._fn

        def variant(*args: Any, **kwargs: Any) -> Any:
            state = recorder._s  # noqa: SLF001
            if mode == PLAIN:
                with state.variants.tracing(mode) as trace:
                    out = fn(*args, **kwargs)
                self._learn(mode, trace)
                return out
            if mode == LATE:  # the one-trace form, its gates in the graph: overdue losses only
                with op_scope.part("step"):
                    started = tf.cast(recorder.step.read_value(), tf.int64)
                    due = state.due_steps_read()
                before = None if state.monitor is None else state.monitor.read_sides()
                with state.variants.tracing(mode, started, before, due_at_start=due) as trace:
                    out = fn(*args, **kwargs)
                self._learn(mode, trace)
                with op_scope.part("step"):
                    told = tf.concat([[started], state.due_steps_read()], 0)
                return out, told
            # A variant that records writes its records with one write at its
            # end, and tells the host the step it began at and what to count.
            with op_scope.part("step"):
                started = tf.cast(recorder.step.read_value(), tf.int64)
            before = None if state.monitor is None else state.monitor.read_sides()
            with (
                state.variants.tracing(mode, started, before, marks_due=self._late) as trace,
                state.emitter.sink.batched(ExecutionContext.current()) as batch,  # per trace
            ):
                out = fn(*args, **kwargs)
            self._learn(mode, trace)
            records, first, last = batch.tick or (0, started, started)
            traced = len(self._host_calls)
            self._host_calls.append([callback for callback, _ in trace.host])
            with op_scope.part("step"):
                told = tf.stack(
                    [
                        started,
                        first,
                        last,
                        tf.constant(records, tf.int64),
                        tf.constant(traced, tf.int64),
                    ]
                )
                if self._late:  # read after the call's marks: which losses are overdue
                    told = tf.concat([told, state.due_steps_read()], 0)
            return out, told, [tensors for _, tensors in trace.host]

        # fn's signature, so the graph's inputs keep the user's argument names
        # (the FlowGraph shows them); no __wrapped__, through which TF would
        # count the variants' traces as retraces of one function.
        functools.update_wrapper(variant, fn)
        variant.__signature__ = inspect.signature(fn)
        variant.__name__ = f"{getattr(fn, '__name__', 'step')}_{mode}"
        # TF counts retraces per code object: one of its own per variant.
        private.count_traces_apart(variant)
        return variant

    def _learn(self, mode: str, trace: Trace) -> None:
        """Keeps what a trace of `mode` saw of the step's advances."""
        known = self._advances.setdefault(mode, trace.advances)
        if not trace.countable or known != trace.advances:
            self._countable = False

    def _due(self, step: int) -> str:
        return variant_due(self._recorder._s, step)  # noqa: SLF001

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
        if step is None or not counting:  # the count is unknown: read the counter
            step, self._unread = int(recorder.step.numpy()), 0
        mode = PLAIN if state.disabled else self._due(step)
        if mode == PLAIN and self._overdue and not state.disabled:
            mode = LATE
        state.host_step = None  # unknown until the call returns
        out = self._variants[mode](*args, **kwargs)
        handed: list = []
        due: list = []
        if mode == LATE:
            out, told = out
            started, *due = told.numpy().tolist()
            step = started
            self._unread = 0
        elif (
            mode != PLAIN
        ):  # a variant that records returns the step it began at, what to count and check
            out, told, values = out
            started, first, last, records, traced, *due = told.numpy().tolist()
            handed = list(zip(self._host_calls[traced], values))
            state.emitter.sink.count(records, first, last)
            if started != step:
                self._moved_outside(step, started, mode)
                step = started
            self._unread = 0
        if self._late and mode != PLAIN:  # overdue after this call: the next one runs late
            after = step + self._advances.get(mode, 1)
            # for one period at most: a loss no longer computed (or that cannot be
            # recorded) does not keep every later call off the plain graph
            self._overdue = any(d <= after < d + state.every for d in due[: state.due_count])
        if counting and self._countable:  # (a trace in this call may have said otherwise)
            state.host_step = step + self._advances[mode]
            self._unread += 1
        for callback, tensors in handed:  # last: a rule check may raise
            callback(*tensors)
        return out

    def _moved_outside(self, counted: int, read: int, ran_as: str) -> None:
        """The step counter changed behind the recorder's back: this call ran
        `ran_as`, picked for the host's count, at step `read`, and the calls
        since the count was last checked ran as picked for the old count; say
        so if that left a due step unrecorded or recorded one off schedule."""
        earlier = range(read - min(self._unread, self._recorder._s.every), read)  # noqa: SLF001
        missed = any(self._due(s) != PLAIN for s in earlier)
        off = self._due(read) != ran_as
        if not (missed or off):
            return
        said = []
        if missed:
            said.append(
                f"{len(earlier)} call(s) before it ran as picked for the old count, so a due step ran unrecorded"
            )
        if off:
            said.append(
                f"the call that found it ran what step {counted} runs ({ran_as}) at step {read}"
            )
        warn_once(
            (id(self._recorder), "step_moved"),
            f"Recorder '{self._recorder.name}': its step changed outside the wrapped step "
            f"(counted {counted}, read {read}: a checkpoint restore or an assign between calls); "
            f"{' and '.join(said)}. Later steps are recorded as usual",
        )
