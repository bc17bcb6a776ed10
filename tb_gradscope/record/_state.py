"""What a Recorder holds besides its step counter, and how a step's tables are written.

Deliberately a plain object (not a tf.Module): nothing here goes into a
checkpoint, so `tf.train.Checkpoint(recorder=rec)` saves the step alone, and a
resumed run starts new snapshots and a new event file.

The step counter is read, and the recorded-step predicate computed, once per
traced step (`now`). A call's tables are computed and written inside one
branch taken at recorded steps only (`writing.recorded_only`). When gradient
conflict or rules need the loss tables as tensors, all of a step's loss tables
are computed together (`tables.recorded_tables`, still one branch) and the rules
are checked on them before the step counter advances.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS, Kind
from tb_gradscope.record import _flow as flow
from tb_gradscope.record import _gradients as gradients_lib
from tb_gradscope.record import _stats as stats
from tb_gradscope.record import _tables as tables_lib
from tb_gradscope.record._block import Block
from tb_gradscope.record._checks import RuleSteps
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._layout import LayoutResolver
from tb_gradscope.record._step_function import Variants
from tb_gradscope.record._writing import Emitter, Stats, graph_key, recorded_only

# Losses whose due step is kept (`RecorderState._due`); more keep the period alone.
_MAX_DUE = 64


class RecorderState:
    """A recorder's emitter, layout, options and per-graph pending work."""

    def __init__(self, emitter: Emitter, layout: LayoutResolver, every: int, step: tf.Variable):
        self.emitter = emitter
        self.step = step  # the recorder's counter (read eagerly when a loss is first seen)
        self.layout = layout
        self.every = every
        self.pending_losses: dict[int, dict] = {}  # per graph: losses for analysis
        self.pending_watched: dict[int, dict] = {}  # per graph: {loss: variables its tape watched}
        self.pending_tables: dict[int, dict] = {}  # per graph: {loss: GRAD_STATS} for rules
        self.pending_optimizers: dict[
            int, list
        ] = {}  # per graph: the optimizers `apply` traced in it
        self.optimizer_labels: dict[
            int, str
        ] = {}  # id(optimizer) -> its FlowGraph label, once known
        self.losses_seen = (
            False  # a loss was handed over since the step last advanced (rules warning)
        )
        # Eager: the step's advances since the last gradients were handed over
        # (None before any), how far `record_drift` is past its step's start.
        self.eager_advances: int | None = None
        self.disabled = False
        self.checks: RuleSteps | None = None
        self.monitor: Any = None  # a DriftMonitor when there are pairs
        self.block: Block | None = None  # the open `training_step()` block
        self.conflict = True
        self.grad_columns: tuple[str, ...] = (
            OPTIONAL_GRAD_COLUMNS  # the optional GRAD_STATS columns recorded
        )
        self.kernels = tables_lib.EagerKernels()  # eager callers' table kernels, traced once
        self.variants = Variants()  # graphs traced by `Recorder.function` as unrecorded variants
        self.host_step: int | None = (
            None  # the counter as `Recorder.function` wrappers count it on the host
        )
        self._now: weakref.WeakKeyDictionary = (
            weakref.WeakKeyDictionary()
        )  # graph -> (step, record)
        self._snapshots: weakref.WeakKeyDictionary = (
            weakref.WeakKeyDictionary()
        )  # graph -> (copies, op count)
        self._branch_start: int | None = None  # op count where the last loss recording branch began
        self._due_slots: dict[str, int] = {}  # loss -> its slot in `_due_steps`
        with tf.init_scope():  # per loss, the step from which it is due (`_due`; transient)
            self._due_steps = tf.Variable(
                tf.zeros([_MAX_DUE], tf.int64), trainable=False, name="due"
            )

    def now(self, step: tf.Variable, ctx: ExecutionContext) -> tuple[tf.Tensor, tf.Tensor]:
        """(step value, is it a recorded step), read once per traced step.

        Inside a graph the pair is kept until `advance` (one read and one
        floormod per step however many records the step writes). In a
        `Recorder.function`'s recorded variant the predicate is the constant
        True, so every gate on it folds away at trace time (`recorded_only`).
        """
        if ctx.eager:  # one op: the predicate is host arithmetic
            value = step.read_value()
            return value, tf.constant(int(value) % self.every == 0)
        graph = tf.compat.v1.get_default_graph()
        if graph not in self._now:
            value = step.read_value()
            if self.variants.recorded(ctx):  # run by the host at recorded steps only
                self._now[graph] = (value, tf.constant(True))
            else:
                self._now[graph] = (value, tf.equal(tf.math.floormod(value, self.every), 0))
        return self._now[graph]

    def advanced(self, ctx: ExecutionContext) -> None:
        """The step counter moves on: the next step reads it again (and a
        `Recorder.function` wrapper counting steps on the host reads it anew
        after an eager move)."""
        self.losses_seen = False
        if ctx.eager:
            self.host_step = None  # moved outside the wrappers: read it again
            if self.eager_advances is not None:
                self.eager_advances += 1
        else:
            self._now.pop(tf.compat.v1.get_default_graph(), None)
            self.variants.note_advance(ctx)

    def gradients_seen(self, ctx: ExecutionContext) -> None:
        """Gradients were handed over: in eager, where this step began."""
        self.losses_seen = True
        if ctx.eager:
            self.eager_advances = 0

    def drift_offset(self, ctx: ExecutionContext) -> int:
        """How far the step `record_drift` sees now is past the start of the
        step it runs in: the advances traced before it in a graph, eagerly
        those since the step's gradients (0 without any)."""
        if ctx.eager:
            return self.eager_advances or 0
        return self.variants.advances_traced()

    def should_record(self, step: tf.Variable, ctx: ExecutionContext) -> tf.Tensor:
        return self.now(step, ctx)[1]

    def emit(
        self,
        step: tf.Variable,
        kind: Kind,
        makers: Mapping[str, Callable],
        ctx: ExecutionContext,
        late: bool = False,
    ) -> Stats | None:
        """Writes `makers`' tables at recorded steps (`late`: eagerly, at this
        step anyway: an eager block where an overdue loss was recorded)."""
        scopes = self.layout.vlayout.layout.scopes
        now, record = self.now(step, ctx)
        if late and ctx.eager:
            record = tf.constant(True)
        return self.emitter.emit(kind, makers, scopes, now, record, ctx=ctx)

    def record_losses(
        self, step: tf.Variable, makers: Mapping[str, Callable[[], list]], ctx: ExecutionContext
    ) -> Stats | None:
        """Records each loss's gradients ({loss: () -> aligned gradients}), and
        the conflicts between them when asked for.

        Inside a graph the same branch also copies the recorded variables, for
        `apply`'s ||delta theta|| (see `snapshot`): one branch op before the
        optimizer step instead of two.
        """
        rollup = self.layout.rollup
        now, record = self._due(step, list(makers), ctx)
        makers = {name: self._marking(name, now, make, ctx) for name, make in makers.items()}
        variables = self._snapshot_candidates(ctx)
        self._mark_block_start(ctx)
        if self.checks is None and not (self.conflict and len(makers) > 1):
            if ctx.xla:
                return self.emit(
                    step,
                    Kind.GRAD_STATS,
                    {
                        n: (lambda f=f: stats.grad_table(f(), rollup, self.grad_columns))
                        for n, f in makers.items()
                    },
                )
            scopes = self.layout.vlayout.layout.scopes

            def tables():
                return [
                    (
                        Kind.GRAD_STATS,
                        n,
                        scopes,
                        None,
                        stats.grad_table(f(), rollup, self.grad_columns),
                    )
                    for n, f in makers.items()
                ]

            self._keep_snapshot(
                variables, self.emitter.write_when(record, now, tables, ctx, variables), ctx
            )
            return None

        def make_aligned():
            return {n: f() for n, f in makers.items()}

        layout = self.layout.vlayout.layout
        if not ctx.xla:

            def write(found):
                return self.emitter.write_due(
                    now, [(t.kind, t.name, t.scopes, t.attrs, t.value) for t in found]
                )

            found, copies = tables_lib.recorded_tables(
                record,
                make_aligned,
                layout,
                rollup,
                self.conflict,
                write,
                variables,
                self.kernels,
                self.grad_columns,
                ctx=ctx,
            )
            self._keep_snapshot(variables, copies, ctx)
            if found and not ctx.eager:
                self.emitter.note_recorded(found[0].value, ctx)
            if self.checks is not None:
                grads = {t.name: t.value for t in found if t.kind == Kind.GRAD_STATS}
                self.pending_tables.setdefault(graph_key(ctx), {}).update(grads)
            return None
        found = tables_lib.recorded_tables(
            record,
            make_aligned,
            layout,
            rollup,
            self.conflict,
            kernels=self.kernels,
            columns=self.grad_columns,
            ctx=ctx,
        )[0]
        written = [
            self.emitter.emit(
                t.kind, {t.name: lambda v=t.value: v}, t.scopes, now, record, t.attrs, ctx=ctx
            )
            for t in found
        ]
        parts = [w for w in written if w is not None]
        if not parts:
            return None
        return Stats(
            parts[0].step, parts[0].record, {k: v for p in parts for k, v in p.tables.items()}
        )

    def _due(
        self, step: tf.Variable, names: Sequence[str], ctx: ExecutionContext
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """(step value, whether a call handing over the losses `names` records):
        at recording steps, and at the first step at or after one where a loss
        is computed but was not recorded (a delayed update on other steps: TD3's
        actor on odd steps). A loss is first due at the first recording step at
        or after the step it is first seen at. Inside a graph the predicate is
        then the step's (its update table and rules follow it). Not under XLA or
        tf.distribute, nor in a `Recorder.function` variant (picked by step on
        the host), which keep the period alone."""
        now, record = self.now(step, ctx)
        if ctx.xla or ctx.distributed or self.variants.recorded(ctx):
            if self.variants.marks_due(ctx):
                for name in names:
                    self._due_slot(name)
            return now, record
        slots = [i for i in (self._due_slot(name) for name in names) if i is not None]
        if not slots:
            return now, record
        if ctx.eager:
            due = self._due_steps.numpy()
            return now, tf.constant(bool(record) or any(int(now) >= int(due[i]) for i in slots))
        late = tf.reduce_any(now >= tf.gather(self._due_steps, slots))
        record = tf.logical_or(record, late)
        self._now[tf.compat.v1.get_default_graph()] = (now, record)
        return now, record

    def _due_slot(self, name: str) -> int | None:
        """Loss `name`'s slot in `_due_steps`, set when it is first seen (None
        beyond _MAX_DUE losses: those keep the period alone). One variable
        made with the recorder, so no trace creates one (which would retrace)."""
        if name not in self._due_slots:
            if len(self._due_slots) >= _MAX_DUE:
                return None
            with tf.init_scope():
                first = int(self.step.numpy())
                self._due_steps[len(self._due_slots)].assign(-(-first // self.every) * self.every)
            self._due_slots[name] = len(self._due_slots)
        return self._due_slots[name]

    def _marking(
        self, name: str, now: tf.Tensor, make: Callable[[], list], ctx: ExecutionContext
    ) -> Callable[[], list]:
        """`make`, which records loss `name` at step `now`: it also moves the
        loss's due step to the next recording step (on the recorded branch only)."""
        slot = self._due_slots.get(name)
        if slot is None or ctx.xla or ctx.distributed:
            return make
        if self.variants.recorded(ctx) and not self.variants.marks_due(ctx):
            return make

        def made() -> list:
            self._due_steps[slot].assign((now // self.every + 1) * self.every)
            return make()

        return made

    def snapshot(
        self, step: tf.Variable, pairs: Sequence[tuple[Any, Any]], ctx: ExecutionContext
    ) -> list[Any] | None:
        """Layout-aligned copies of the variables handed to the optimizer, taken
        only at recorded steps (None for variables the step cannot write;
        None eagerly at an unrecorded step).

        Reuses the copies the step's loss recording branch took when nothing
        can have written the handed variables since (no op but a read takes
        them); otherwise copies them now, in a branch of their own.
        """
        if ctx.eager and not bool(self.should_record(step, ctx)):
            return None  # nothing to copy, nor to record after the optimizer
        kept = (
            self._snapshots.pop(tf.compat.v1.get_default_graph(), None) if not ctx.eager else None
        )
        vlayout = self.layout.vlayout
        handed = sorted({i for _, v in pairs if (i := vlayout.index_of(v)) is not None})
        if kept is not None and _untouched_since(kept[1], [vlayout.variables[i] for i in handed]):
            before: list[Any] = [None] * len(vlayout.variables)
            for i in handed:
                before[i] = kept[0][i]
            return before
        return gradients_lib.snapshot_if_recording(
            self.layout, pairs, self.should_record(step, ctx), ctx
        )

    def _snapshot_candidates(self, ctx: ExecutionContext) -> list[Any]:
        """The variables the loss recording branch copies: all recorded ones, inside
        a graph (a copy of a variable the optimizer does not write costs nothing:
        it shares the buffer); none eagerly, under XLA or tf.distribute, nor
        inside a `training_step()` block whose values before the step are
        known (or taken at an eager block's entry): `apply` copies nothing there."""
        if ctx.eager or ctx.xla or ctx.distributed:
            return []
        block = self.block
        if block is not None and block.inside() and (block.eager or block.before is not None):
            return []
        return list(self.layout.vlayout.variables)

    def _keep_snapshot(
        self, variables: Sequence[Any], copies: Sequence[tf.Tensor], ctx: ExecutionContext
    ) -> None:
        if variables and copies:
            graph = tf.compat.v1.get_default_graph()
            self._snapshots[graph] = (list(copies), len(graph.get_operations()))
            block = self.block
            if (
                block is not None
                and block.before is None
                and block.holds_current_graph(ctx)
                and _untouched_since(block.first_op, variables, self._branch_start)
            ):
                block.before = list(copies)  # the values before the block's first optimizer step

    def _mark_block_start(self, ctx: ExecutionContext) -> None:
        """Notes where a loss recording branch starts (for `_keep_snapshot`)."""
        if not ctx.eager:
            self._branch_start = len(tf.compat.v1.get_default_graph().get_operations())

    def eager_block_snapshot(self, step: tf.Variable, ctx: ExecutionContext) -> list[Any] | None:
        """Eagerly, at a block's entry: copies of every recorded variable at a
        recorded step, or at a step where a loss is overdue (computed on other
        steps: TD3's delayed actor), whose gradients the block may record late
        (None otherwise, or while the variables are unknown)."""
        vlayout = self.layout.vlayout
        if vlayout is None or ctx.xla:
            return None
        if not bool(self.should_record(step, ctx)) and not self.overdue(step):
            return None
        return stats.snapshot(vlayout.variables)

    def expect_loss(self, name: str) -> None:
        """Loss `name` is computed by a step (seen where it is not recorded: a
        watched step's plain trace): from now on it is due (`_due`)."""
        self._due_slot(name)

    @property
    def due_count(self) -> int:
        """How many losses have a due step."""
        return len(self._due_slots)

    def due_steps_read(self) -> tf.Tensor:
        """Every slot's due step, read where it is called (a graph's tensor)."""
        return self._due_steps.read_value()

    def settle_late(self, step: tf.Variable, ctx: ExecutionContext) -> None:
        """In a late variant's own graph, at its block's exit: the step records
        (its update table, rules) where a loss was recorded in it, that is
        where one moved its due step since the call's start."""
        start = self.variants.due_at_start(ctx)
        if start is None:
            return
        now, _ = self.now(step, ctx)
        moved = tf.reduce_any(tf.not_equal(self._due_steps.read_value(), start))
        self._now[tf.compat.v1.get_default_graph()] = (now, moved)

    def late_block_snapshot(self, ctx: ExecutionContext) -> list[Any] | None:
        """In a late variant's own graph, at a block's entry: copies of every
        recorded variable (the call runs only where a loss is overdue), else None."""
        vlayout = self.layout.vlayout
        if vlayout is None or self.variants.due_at_start(ctx) is None:
            return None
        return stats.snapshot(vlayout.variables)

    def due_steps(self) -> list[int]:
        """Each loss's next due step, in slot order (host side)."""
        return [int(d) for d in self._due_steps.numpy()[: len(self._due_slots)]]

    def overdue(self, step: tf.Variable) -> bool:
        """Whether a loss was due at or before `step` and is not recorded yet."""
        now = int(step.numpy())
        return any(now >= d for d in self.due_steps())

    def write_flowgraph_now(self, step: tf.Variable) -> None:
        """Writes the FlowGraph eagerly at the current step (an eager block's exit)."""
        self.emitter.flowgraph_deferred = False
        with tf.init_scope():
            self.emitter.write_flowgraph(step.read_value(), tf.constant(True))

    def record_updates(
        self,
        step: tf.Variable,
        maker: Callable[[], tf.Tensor],
        ctx: ExecutionContext,
        late: bool = False,
    ) -> tf.Tensor | None:
        """Writes the UPDATE_STATS table and returns it as a tensor (for rules);
        eagerly at an unrecorded step, writes nothing and returns None (`late`
        as `emit`'s)."""
        now, record = self.now(step, ctx)
        if late and ctx.eager:
            record = tf.constant(True)
        scopes = self.layout.vlayout.layout.scopes

        def work() -> tf.Tensor:
            table = maker()
            with tf.control_dependencies(
                [self.emitter.write_due(now, [(Kind.UPDATE_STATS, "", scopes, None, table)])]
            ):
                return tf.identity(table)

        if ctx.eager:
            return work() if bool(record) else None
        return recorded_only(record, work, lambda: tf.zeros([len(scopes), 2], tf.float32))

    def check_step(
        self, step: tf.Variable, updates: tf.Tensor | None, ctx: ExecutionContext
    ) -> None:
        """Checks rules on this step's pending tables (before `step` advances)."""
        if self.checks is None or ctx.xla:
            return
        grads = self.pending_tables.pop(graph_key(ctx), None)
        if grads:
            scopes = self.layout.vlayout.layout.scopes
            self.checks.at_step(
                *self.now(step, ctx),
                grads,
                scopes,
                updates,
                ctx,
                defer=lambda callback, tensors: self.variants.defer(callback, tensors, ctx),
            )

    def check_written(self, item: Stats, ctx: ExecutionContext) -> None:
        """Checks rules on Stats returned from a jit_compile=True step."""
        if self.checks is None or self.layout.vlayout is None:
            return
        grads, updates = {}, None
        for tag, table in item.tables.items():
            kind, name = self.emitter.record_of[tag]
            if kind == Kind.GRAD_STATS:
                grads[name] = table
            elif kind == Kind.UPDATE_STATS:
                updates = table
        scopes = self.layout.vlayout.layout.scopes
        self.checks.at_step(item.step, item.record, grads, scopes, updates, ctx)

    def note_optimizer(self, optimizer: Any, ctx: ExecutionContext) -> None:
        """`apply` traced `optimizer` in this graph (graph mode only): a
        function's losses are labelled by the optimizer objects it applies."""
        if not ctx.eager:
            found = self.pending_optimizers.setdefault(graph_key(ctx), [])
            if all(o is not optimizer for o in found):
                found.append(optimizer)

    def stash_losses(self, losses: Mapping[str, Any], tape: Any, ctx: ExecutionContext) -> None:
        """Keeps a traced step's losses for its analysis (graph mode only), with
        the variables their tape watched (the tape boundary is a cut)."""
        if not ctx.eager and losses:
            self.pending_losses.setdefault(graph_key(ctx), {}).update(losses)
            if tape is not None:
                watched = list(tape.watched_variables())
                self.pending_watched.setdefault(graph_key(ctx), {}).update(
                    {name: watched for name in losses}
                )

    def analyze_traced_step(
        self, step: tf.Variable, recorder: str, ctx: ExecutionContext, defer_write: bool = False
    ) -> bool:
        """At trace time, after the optimizer: analyze this graph's losses, then
        check the rules on the run's FlowGraph.

        A step split over several traced functions (one per optimizer) gives
        one FlowGraph per function; each one's losses are merged into the run's
        FlowGraph (a new revision, written again). With `defer_write` (a
        function traced inside an eager `training_step()` block) the FlowGraph
        is written and checked at the block's exit instead.

        Returns True when this call found new losses' flow.
        """
        if ctx.eager:
            return False
        graph_losses = self.pending_losses.pop(graph_key(ctx), {})
        watched = self.pending_watched.pop(graph_key(ctx), {})
        emitter = self.emitter
        known = emitter.flowgraph
        fresh = {
            name: value
            for name, value in graph_losses.items()
            if known is None or name not in known.cells
        }
        if not fresh:
            return False
        vlayout = self.layout.vlayout
        found = flow.analyze_step(
            tf.compat.v1.get_default_graph(),
            fresh,
            vlayout.variable_scopes(),
            vlayout.layout.scopes,
            recorder,
            {name: watched[name] for name in fresh if name in watched},
        )
        if found is None:
            return False
        found = flow.relabel_optimizers(
            found, known, self.pending_optimizers.pop(graph_key(ctx), []), self.optimizer_labels
        )
        emitter.set_flowgraph(found if known is None else flow.merge(known, found), defer_write)
        if self.checks is not None:
            self.checks.at_trace(emitter.flowgraph, step)
        return True


# Ops that take a variable and leave it as it was.
_READS = frozenset(
    {"ReadVariableOp", "VarIsInitializedOp", "VariableShape", "ResourceGather", "ResourceGatherNd"}
)


def _untouched_since(first_op: int, variables: Sequence[Any], last_op: int | None = None) -> bool:
    """True when no op built after the first `first_op` ops of this graph (and
    before the first `last_op`, if given) takes one of `variables` other than
    to read it."""
    graph = tf.compat.v1.get_default_graph()
    handles = set()
    for variable in variables:
        handle = getattr(variable, "handle", None)
        if handle is None:
            return False
        handles.add(id(graph.capture(handle)) if hasattr(graph, "capture") else id(handle))
    for op in graph.get_operations()[first_op:last_op]:
        if op.type not in _READS and any(id(t) in handles for t in op.inputs):
            return False
    return True
