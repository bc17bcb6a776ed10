"""Records to the event file: tagged and gated to recorded steps (`Emitter`),
then written through the recorder's own file writer or the user's default one
(`SummarySink`).

Recorded steps. Outside XLA, all records of one call are computed and
written inside one `tf.cond` on the recorded-step predicate
(`recorded_only`), kept as one function call when it handles small tensors
only: an unrecorded step then pays one branch op for them, whatever the
recording costs. Inside a `jit_compile=True` trace summaries cannot be
written: tables are computed under a `tf.cond` and collected as `Stats`,
which the user returns from the compiled step and hands to `Recorder.write`
outside it.

Metadata. TF2's summary writer repeats a summary's metadata on every event,
so the full metadata is written only on a tag's first write to each writer
through this sink and b"" afterwards (TensorBoard keeps a tag's first
metadata). Which (writer, tag) pairs were written is in-graph state (a string
variable), so one trace serves every step; it is deliberately kept out of
checkpoints, since a resumed run starts a new event file that needs the
metadata again.

Flushing. TF's writer says nothing when its event file is deleted, and when
the disk is full its flush fails *inside the training step* (the step raises
OutOfRangeError: "File too large"), which would let the recorder kill
training. So the sink's own writer never flushes by itself (huge queue and
interval): its records wait in the writer's queue, in memory, until a host
callback (`tf.py_function`, at recorded steps only, gated in-graph so it runs
only when a flush is due) flushes them every FLUSH_SECS or FLUSH_RECORDS,
through `event_file.EventFile`, which checks first that the file can take
them and holds, drops or moves them when it cannot. A `Recorder.function`
variant's one write, an eager write and the Keras callback's write of a
recorded batch leave that count to the host, after the call (`Batch`,
`write_counted`, `SummarySink.count`): the in-graph gate is ~25 ops, a tenth
of a small recording call.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.format.flowgraph import FlowGraph
from tb_gradscope.format.metadata import (
    KIND_SPECS,
    Kind,
    create_summary_metadata,
    make_info,
    tag_for,
)
from tb_gradscope.format.records import encode_json
from tb_gradscope.record import _distribute as distribute
from tb_gradscope.record import _op_scope as op_scope
from tb_gradscope.record import _stats as stats
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._event_file import EventFile
from tb_gradscope.record._reductions import BIG

# The own writer flushes from the host callback only: every FLUSH_SECS, or when
# FLUSH_RECORDS records are queued.
FLUSH_SECS = 2.0
FLUSH_RECORDS = 200


@dataclasses.dataclass
class Batch:
    """What a `batched` write leaves the host to count after the call: the
    number of records and the steps of the first and the last (None when the
    sink's own writer took none)."""

    tick: tuple[int, tf.Tensor, tf.Tensor] | None = None


class NoWriterError(RuntimeError):
    """A record is due but there is no summary writer to write it to."""


class SummarySink:
    """Writes tb_gradscope records to one event-file writer.

    Args:
      logdir: a directory for the sink's own writer, or None to use the user's
        default `tf.summary` writer at the time each write is traced.
      name: the recorder's name, used in messages.

    In multi-worker training only the chief writes: on other workers the sink
    opens no file and its writes only compute their values (`_compute_only`).
    """

    def __init__(self, logdir: str | None, name: str):
        self.name = name
        self.logdir = logdir
        self.chief = distribute.is_chief()
        self._writer = None
        self._written = distribute.local_variable(
            tf.constant([], tf.string),
            shape=tf.TensorShape([None]),
            trainable=False,
            name="written_tags",
        )
        self._file: EventFile | None = None
        self._held: tuple[Any, list] | None = None  # (graph, records) while `batched`
        self._compiled: dict[tuple, Callable] = {}  # eager writes, per writer and set of records
        if logdir is not None and self.chief:
            self._file = EventFile(
                logdir, name, lambda: self._written.assign(tf.constant([], tf.string))
            )
            self._writer = self._file.writer
            # The in-graph gate of the host callback (`_tick`); one device, never
            # mirrored (only the chief has them).
            self._unticked = distribute.local_variable(
                0, dtype=tf.int64, trainable=False, name="unticked"
            )
            self._tick_after = distribute.local_variable(
                0.0, dtype=tf.float64, trainable=False, name="tick_after"
            )
            self._first_step = distribute.local_variable(
                0, dtype=tf.int64, trainable=False, name="first_unticked_step"
            )

    @property
    def losses(self) -> int:
        """Faults of the own event file seen so far (gone, not writable, no room, not growing)."""
        return self._file.losses if self._file is not None else 0

    @property
    def reopened(self) -> int:
        """How often the own writer went on in a new event file."""
        return self._file.reopened if self._file is not None else 0

    @property
    def dropped(self) -> list[tuple[int, int, int]]:
        """(first step, last step, records) never written, of the own writer."""
        return list(self._file.dropped) if self._file is not None else []

    @contextlib.contextmanager
    def as_default(self) -> Iterator[None]:
        """The writer records go to; raises NoWriterError when there is none."""
        if self._writer is not None:
            # Not writer.as_default(): its exit adds a flush op to the traced
            # step, which raises inside the step when the disk is full.
            with private.default_writer_set(self._writer):
                yield
            return
        if not private.has_default_writer():
            raise NoWriterError(
                f"Recorder '{self.name}' has no summary writer: pass "
                "Recorder(logdir=...) or run the step inside "
                "`with tf.summary.create_file_writer(logdir).as_default():`"
            )
        yield

    def write(
        self,
        tag: str,
        metadata: bytes,
        value: tf.Tensor | Callable[[], tf.Tensor],
        step: tf.Tensor,
        record: tf.Tensor,
        once: bool = False,
    ) -> tf.Tensor:
        """Writes `value` under `tag` at `step` when `record` is true.

        `value` may be a callable, which then runs only when a record is due.
        With `once`, the tag is written only if it never was through this sink.
        Returns a bool tensor: written or not.
        """
        with op_scope.part("write"):
            if not self.chief:
                return _compute_only(value, record)
            with self.as_default():
                # Per writer: a user who switches default writers starts a new file.
                key = f"{_writer_token(private.default_writer())}:{tag}"
                first = tf.logical_not(tf.reduce_any(tf.equal(self._written, key)))
                condition = tf.logical_and(record, first) if once else record
                with tf.summary.record_if(condition):
                    meta = tf.where(first, tf.constant(metadata), tf.constant(b""))
                    written = tf.summary.write(tag, value, step=step, metadata=meta)
                mark = tf.logical_and(written, first)
                done = tf.cond(mark, lambda: self._mark(key), lambda: written)
                if self._writer is None:
                    return done
                return tf.cond(done, lambda: self._tick(1, step), lambda: done)

    def write_due(
        self, records: Sequence[tuple[str, bytes, Any, bool]], step: tf.Tensor
    ) -> tf.Tensor:
        """Writes records already known to be due: (tag, metadata, value, once) each.

        For use inside the recorded-step branch, where a per-record predicate
        and `record_if` would only cost ops: the written-tags list is read once,
        updated once, and the host callback runs once for all the records.
        Inside `batched`, held for its one write instead. Returns True (once
        the records' values are computed).
        """
        if not records:
            return tf.constant(True)
        held = self._held
        # Asked here: `strategy.run` inside a held trace builds its replicas in the same graph.
        if (
            held is not None
            and held[0] is tf.compat.v1.get_default_graph()
            and not ExecutionContext.current().distributed
        ):
            held[1].extend((*record, step) for record in records)
            with tf.control_dependencies([value for _, _, value, _ in records]):
                return tf.constant(True)
        return self._write_records([(*record, step) for record in records])

    def write_counted(
        self, records: Sequence[tuple[str, bytes, Any, bool]], step: tf.Tensor
    ) -> tf.Tensor:
        """`write_due` for a traced function whose caller counts the records
        (`count`) after each call, as a `batched` write's does: no in-graph
        flush gate. Returns int64 [first step, last step, records queued]
        (zeros when the sink's own writer took none)."""
        return self._write_told([(*record, step) for record in records])

    def _write_told(self, items: Sequence[tuple[str, bytes, Any, bool, Any]]) -> tf.Tensor:
        """`_write_records` of `items`, returning what the host must count."""
        batch = Batch()
        self._write_records(items, batch)
        if batch.tick is None:  # nothing for the own writer: nothing to count
            return tf.zeros([3], tf.int64)
        queued, first, last = batch.tick
        return tf.stack([first, last, tf.constant(queued, tf.int64)])

    @contextlib.contextmanager
    def batched(self, ctx: ExecutionContext) -> Iterator[Batch]:
        """Holds the `write_due` calls made in the graph being traced and
        writes them with one call at exit: one read and one update of the
        written-tags list and one write of a record written once (the
        FlowGraph) for a whole traced step, and no in-graph flush gate: the
        yielded `Batch` tells what the caller must `count` after each run.
        For a step that runs only when its records are due (a
        `Recorder.function` variant): writes from control-flow branches,
        eagerly or under tf.distribute are not held."""
        batch = Batch()
        if ctx.eager or ctx.distributed or self._held is not None:
            yield batch
            return
        self._held = (tf.compat.v1.get_default_graph(), [])
        try:
            yield batch
            held = self._held[1]
        finally:
            self._held = None
        self._write_records(held, batch)

    def count(self, records: int, first: int, step: int) -> None:
        """Counts `records` records a `batched` write queued at steps
        first..step (the host's side of the in-graph flush gate); flushes when
        due."""
        if records and self._file is not None:
            self._host_tick(None, records, first, step)

    def _write_records(
        self, items: Sequence[tuple[str, bytes, Any, bool, tf.Tensor]], batch: Batch | None = None
    ) -> tf.Tensor:
        """Writes (tag, metadata, value, once, step) items in order; a record
        written once appears once. Returns True. With `batch`, the records are
        left to the host to count (`Batch.tick`) instead of an in-graph gate."""
        with op_scope.part("write"):
            if not items:
                return tf.constant(True)
            if not self.chief:  # computes what the chief writes (see `_compute_only`)
                with tf.control_dependencies([value for _, _, value, _, _ in items]):
                    return tf.constant(True)
            items = _once_each(items)
            # Asked here: every producer writes through the sink, some under tf.init_scope.
            if ExecutionContext.current().eager:
                return self._write_compiled(items)
            with self.as_default():
                token = _writer_token(private.default_writer())
                keys = tf.constant([f"{token}:{tag}" for tag, *_ in items])
                seen = self._written.read_value()
                # Every record's test at once (a handful of ops, not four per record):
                # a record is written (with metadata) or, written once, skipped.
                first = tf.logical_not(
                    tf.reduce_any(tf.equal(tf.reshape(seen, [-1, 1]), keys), axis=0)
                )
                metas = tf.unstack(
                    tf.where(first, tf.constant([item[1] for item in items]), tf.constant(b""))
                )
                firsts = tf.unstack(first) if any(item[3] for item in items) else None
                for i, (tag, _, value, once, step) in enumerate(items):
                    with tf.summary.record_if(firsts[i] if once else True):
                        tf.summary.write(tag, value, step=step, metadata=metas[i])
                # The keys written first now: a gather at `where` (boolean_mask is 12 ops).
                new = tf.gather(keys, tf.reshape(tf.where(first), [-1]))
                self._written.assign(tf.concat([seen, new], 0))
                if self._writer is not None and batch is not None:
                    batch.tick = (
                        len(items),
                        tf.cast(items[0][4], tf.int64),
                        tf.cast(items[-1][4], tf.int64),
                    )
                elif self._writer is not None:
                    self._tick(len(items), items[-1][4], first=items[0][4])
            return tf.constant(True)

    def _write_compiled(self, items: Sequence[tuple[str, bytes, Any, bool, Any]]) -> tf.Tensor:
        """An eager write as one call of a function traced once per writer and
        set of records (written op by op it is ~40 eager ops, ~6 ms of CPU);
        the host counts its records after the call, as for `batched`."""
        with self.as_default():
            token = _writer_token(private.default_writer())
        key = (token, tuple((tag, metadata, once) for tag, metadata, _, once, _ in items))
        write = self._compiled.get(key)
        if write is None:
            records = key[1]

            def write_values(values: list[tf.Tensor], steps: list[tf.Tensor]) -> tf.Tensor:
                return self._write_told(
                    [
                        (tag, metadata, value, once, step)
                        for (tag, metadata, once), value, step in zip(records, values, steps)
                    ]
                )

            write = self._compiled[key] = tf.function(write_values, autograph=False)
        values = [tf.convert_to_tensor(value) for _, _, value, _, _ in items]
        steps = [tf.cast(tf.convert_to_tensor(step), tf.int64) for *_, step in items]
        if write.experimental_get_tracing_count() == 0:
            # Traced here, not by the call: TF counts the traces of every
            # `write_values` of the process together (per code object), so the
            # first write of five recorders would warn of "retracing".
            write.get_concrete_function(values, steps)
        told = write(values, steps)
        first, last, records = told.numpy().tolist()
        self.count(records, first, last)  # here, not by an in-graph gate
        return tf.constant(True)

    def _tick(self, records: int, step: tf.Tensor, first: tf.Tensor | None = None) -> tf.Tensor:
        """In-graph: counts `records` written records (at steps `first`..`step`)
        and, when a flush is due (FLUSH_SECS since the last callback, or
        FLUSH_RECORDS records, or every recorded step while records are held),
        runs the host callback; returns True. The gate keeps the callback,
        which costs more than a small step, off most recorded steps. TF refuses
        its clock op under op determinism: there every call runs the callback."""
        step = tf.cast(step, tf.int64)
        first = step if first is None else tf.cast(first, tf.int64)
        queued = self._unticked.assign_add(records)
        self._first_step.assign(tf.where(tf.equal(queued, records), first, self._first_step))
        if private.op_determinism_enabled():
            return self._host_tick_op(step)
        due = tf.logical_or(tf.timestamp() >= self._tick_after, queued >= FLUSH_RECORDS)
        return tf.cond(due, lambda: self._host_tick_op(step), lambda: tf.constant(True))

    def _host_tick_op(self, step: tf.Tensor) -> tf.Tensor:
        # The writer's handle as input orders the callback with the step's
        # other writes to it (automatic control dependencies on resources).
        wait = tf.py_function(
            self._host_tick,
            [
                private.writer_resource(self._writer),
                self._unticked.read_value(),
                self._first_step.read_value(),
                step,
            ],
            tf.float64,
        )
        self._unticked.assign(0)
        if not private.op_determinism_enabled():
            self._tick_after.assign(tf.timestamp() + wait)
        return tf.constant(True)

    def _host_tick(self, _handle: Any, records: Any, first: Any, step: Any) -> float:
        """Counts the records written at steps first..step; flushes when due.
        Returns the seconds until the next callback is due (0 while records
        are held, so a heal is seen at the next recorded step)."""
        file = self._file
        file.queue(int(first), int(step), int(records))
        if file.fault or file.queued >= FLUSH_RECORDS or file.since_flush() >= FLUSH_SECS:
            file.flush(int(step))
        return 0.0 if file.fault else FLUSH_SECS

    def _mark(self, key: str) -> tf.Tensor:
        self._written.assign(tf.concat([self._written, [key]], 0))
        return tf.constant(True)

    def flush(self) -> None:
        """Flushes the writer if its event file can take the records (else
        they are held, as at a recorded step)."""
        if self._file is not None:
            self._file.flush()
        elif self.chief and private.has_default_writer():
            tf.summary.flush()

    def close(self) -> None:
        """Flushes and closes the own writer (the user's default one is theirs)."""
        if self._file is not None:
            self._file.close()


class Stats(NamedTuple):
    """Stats computed inside an XLA-compiled step, to be written outside it.

    Return it from the `jit_compile=True` function and pass it to
    `Recorder.write`. `tables` maps a record tag to its [scopes, columns] table.
    """

    step: tf.Tensor
    record: tf.Tensor
    tables: dict


def graph_key(ctx: ExecutionContext) -> int:
    """Identifies the graph being traced (0 when eager)."""
    return 0 if ctx.eager else id(tf.compat.v1.get_default_graph())


def recorded_only(record: tf.Tensor, work: Callable[[], Any], skip: Callable[[], Any]) -> Any:
    """`tf.cond(record, work, skip)`, as one function call when the branch is small.

    TF lowers a cond to switch/merge ops, and an untaken branch still costs its
    every op (dead-tensor propagation): kept as an `If` call, an unrecorded step
    pays one op however many the recorded branch holds. But TF runs a branch
    kept as a call more slowly (measured: a 1M-parameter model's recorded step
    +3-15 %), so a branch that handles a big tensor (>= `reductions.BIG`
    elements), where per-element costs dominate, is left to TF's lowering.
    A predicate known when traced (a `Recorder.function`'s recorded variant)
    builds the branch it selects and no cond.
    """
    known = tf.get_static_value(record)
    if known is not None:  # a step known recorded (or not) when traced: no branch at all
        return work() if bool(known) else skip()
    # Asked here: the drift monitor and the rules build branches of their own with it.
    ctx = ExecutionContext.current()
    if ctx.eager or ctx.xla:
        return tf.cond(record, work, skip)
    graph = tf.compat.v1.get_default_graph()
    first = len(graph.get_operations())
    out = tf.cond(record, work, skip)
    for op in graph.get_operations()[first:]:
        branch = private.cond_true_branch(op)
        if op.type in ("If", "StatelessIf") and branch is not None and not _handles_big(branch):
            private.keep_cond_as_call(op)
    return out


def _handles_big(branch: Any) -> bool:
    """Whether an op of the branch's graph outputs a tensor of at least BIG elements."""
    for op in branch.get_operations():
        for t in op.outputs:
            size = t.shape.num_elements()
            if size is not None and size >= BIG:
                return True
    return False


class Emitter:
    """Writes a recorder's records through its sink, or defers them under XLA."""

    def __init__(self, sink: SummarySink, recorder: str, every_n_steps: int):
        self.sink = sink
        self.recorder = recorder
        self.every = every_n_steps
        self.flowgraph: FlowGraph | None = None
        self.flowgraph_deferred = False  # known, but written later (an eager block's exit)
        self._flowgraph_revision = 0  # bumped when traced functions' losses are merged in
        self.flowgraph_attrs: dict = {}  # e.g. {"rules": [...]} for `tb-gradscope check`
        self._metadata: dict[str, bytes] = {}
        self._layouts: dict[tuple[Kind, str], list[tuple[str, ...]]] = {}  # rows per tag revision
        self.record_of: dict[str, tuple[Kind, str]] = {}  # tag -> (kind, name)
        self._deferred: dict[int, list[Stats]] = {}
        self._recorded: weakref.WeakKeyDictionary = (
            weakref.WeakKeyDictionary()
        )  # graph -> [branch outputs]
        self.deferred_made = False
        self.deferred_written = False

    def metadata(
        self, kind: Kind, name: str, scopes: Sequence[str], attrs: Mapping | None = None
    ) -> tuple[str, bytes]:
        """The tag of a record and its full serialized metadata (fixed on first use).

        TensorBoard keeps a tag's first metadata, so a table whose rows
        change (a CONFLICT pair sharing other scopes at a later eager step)
        is written under a tag of its own per row layout (`tag_for`'s
        `layout`): every step's rows are the ones its metadata names."""
        rows = tuple(scopes) if KIND_SPECS[kind].is_table else ()
        layouts = self._layouts.setdefault((Kind(kind), name), [])
        if rows not in layouts:
            layouts.append(rows)
        tag = tag_for(kind, name, layouts.index(rows))
        if tag not in self._metadata:
            self.record_of[tag] = (Kind(kind), name)
            if kind in (Kind.GRAD_STATS, Kind.UPDATE_STATS) and self.flowgraph_attrs:
                # Also with the loss and update tables: an eager loop never traced
                # writes no FlowGraph, a step that brings its own gradients to
                # `rec.apply` no loss table, and `tb-gradscope check` must still
                # find the rules (and say it had nothing to check them on).
                attrs = {**self.flowgraph_attrs, **(attrs or {})}
            info = make_info(
                kind,
                name,
                scopes=scopes if KIND_SPECS[kind].is_table else (),
                attrs={"every_n_steps": self.every, "recorder": self.recorder, **(attrs or {})},
            )
            self._metadata[tag] = create_summary_metadata(info).SerializeToString()
        return tag, self._metadata[tag]

    def emit(
        self,
        kind: Kind,
        makers: Mapping[str, Callable[[], tf.Tensor]],
        scopes: Sequence[str],
        step: tf.Tensor,
        record: tf.Tensor,
        attrs: Mapping | None = None,
        *,
        ctx: ExecutionContext,
    ) -> Stats | None:
        """One table per maker: written when `record`, or deferred inside XLA.

        `attrs` are added to the records' metadata attrs.
        """
        if ctx.xla:
            shape = [len(scopes), len(KIND_SPECS[kind].columns)]
            tables = {}
            for name, make in makers.items():
                tag, _ = self.metadata(kind, name, scopes, attrs)
                tables[tag] = tf.cond(record, make, lambda: tf.zeros(shape, tf.float32))
            result = Stats(step, record, tables)
            self._deferred.setdefault(graph_key(ctx), []).append(result)
            self.deferred_made = True
            return result
        self.write_when(
            record,
            step,
            lambda: [(kind, name, scopes, attrs, make()) for name, make in makers.items()],
            ctx,
        )
        return None

    def write_when(
        self,
        record: tf.Tensor,
        step: tf.Tensor,
        tables: Callable[[], Sequence[tuple[Kind, str, Sequence[str], Mapping | None, tf.Tensor]]],
        ctx: ExecutionContext,
        snapshot: Sequence[Any] = (),
    ) -> list[tf.Tensor]:
        """At recorded steps: computes `tables()` ((kind, name, scopes, attrs,
        value) each) and writes them, and the FlowGraph if due, in one branch.

        The same branch reads the `snapshot` variables: returns their values
        (empty tensors at unrecorded steps; [] eagerly when not recording).
        """

        def work() -> list[tf.Tensor]:
            done = self.write_due(step, tables())
            return [done] + stats.snapshot(snapshot)

        def skip() -> list[tf.Tensor]:
            return [tf.constant(False)] + [tf.zeros([0], v.dtype) for v in snapshot]

        if ctx.eager:
            return work()[1:] if bool(record) else []
        out = recorded_only(record, work, skip)
        self.note_recorded(out[0], ctx)
        return list(out[1:])

    def note_recorded(self, done: tf.Tensor, ctx: ExecutionContext) -> None:
        """Keeps a recorded-step branch's output for `take_recorded` (graph mode)."""
        if not ctx.eager:
            self._recorded.setdefault(tf.compat.v1.get_default_graph(), []).append(done)

    def take_recorded(self, ctx: ExecutionContext) -> list[tf.Tensor]:
        """The recorded-step branches built so far in this graph (and forgets them).

        The optimizer step is run after them: a branch still waiting to read the
        gradients would keep the optimizer from reusing their buffers, and with
        the copy for ||delta theta|| that doubled the memory of a recorded step.
        """
        if ctx.eager:
            return []
        return self._recorded.pop(tf.compat.v1.get_default_graph(), [])

    def write_due(
        self,
        step: tf.Tensor,
        tables: Sequence[tuple[Kind, str, Sequence[str], Mapping | None, tf.Tensor]],
    ) -> tf.Tensor:
        """Writes tables ((kind, name, scopes, attrs, value) each) and the FlowGraph
        if not written yet, from inside the recorded-step branch."""
        records = []
        for kind, name, scopes, attrs, value in tables:
            tag, meta = self.metadata(kind, name, scopes, attrs)
            records.append((tag, meta, value, False))
        return self.sink.write_due(records + self._flowgraph_record(), step)

    def take_deferred(self, step: tf.Tensor, ctx: ExecutionContext) -> Stats:
        """Every Stats deferred in the graph being traced, merged into one."""
        pending = self._deferred.pop(graph_key(ctx), [])
        if not pending:
            return Stats(step, tf.constant(False), {})
        tables = {}
        for item in pending:
            tables.update(item.tables)
        return Stats(pending[0].step, pending[0].record, tables)

    def write(self, item: Stats) -> None:
        """Writes deferred Stats (outside XLA)."""
        self.deferred_written = True

        def work() -> tf.Tensor:
            records = [
                (tag, self._metadata[tag], table, False) for tag, table in item.tables.items()
            ]
            return self.sink.write_due(records + self._flowgraph_record(), item.step)

        recorded_only(item.record, work, lambda: tf.constant(False))

    def write_flowgraph(self, step: tf.Tensor, record: tf.Tensor) -> None:
        """The FlowGraph blob, at the first recorded step after it is known."""
        if self.flowgraph is not None:
            recorded_only(
                record,
                lambda: self.sink.write_due(self._flowgraph_record(), step),
                lambda: tf.constant(False),
            )

    def set_flowgraph(self, flowgraph: FlowGraph, deferred: bool = False) -> None:
        """The run's FlowGraph from now on. A replaced one (more losses merged
        in) is a new revision, written under a tag of its own (each revision is
        written once; readers take the latest written at or before a step)."""
        if self.flowgraph is not None:
            self._flowgraph_revision += 1
        self.flowgraph = flowgraph
        self.flowgraph_deferred = deferred

    def _flowgraph_record(self) -> list[tuple[str, bytes, tf.Tensor, bool]]:
        """The FlowGraph as a record for `SummarySink.write_due` (written once), if due."""
        if self.flowgraph is None or self.flowgraph_deferred:
            return []
        name = str(self._flowgraph_revision) if self._flowgraph_revision else ""
        tag, meta = self.metadata(Kind.FLOWGRAPH, name, (), self.flowgraph_attrs)
        return [(tag, meta, tf.constant([encode_json(self.flowgraph.to_json())]), True)]


def _compute_only(value: Any, record: tf.Tensor) -> tf.Tensor:
    """A non-chief's write: computes what the chief's would, writes nothing.

    Under MultiWorkerMirroredStrategy the tables of a step hold cross-worker
    reductions (collectives): every worker must build and run the same ones,
    at the same steps, or the chief's wait forever. Returns False.
    """
    if not callable(value):
        return tf.constant(False)
    if ExecutionContext.current().eager:  # asked here: any producer's write, as above
        if bool(record):
            value()
        return tf.constant(False)

    def compute() -> tf.Tensor:
        with tf.control_dependencies(tf.nest.flatten(value())):
            return tf.constant(False)

    return tf.cond(record, compute, lambda: tf.constant(False))


def _once_each(items: Sequence[tuple[str, bytes, Any, bool, Any]]) -> list:
    """`items` without the repeats of a record written once (same tag)."""
    kept, once_tags = [], set()
    for item in items:
        tag, once = item[0], item[3]
        if once and tag in once_tags:
            continue
        if once:
            once_tags.add(tag)
        kept.append(item)
    return kept


_tokens = itertools.count()


def _writer_token(writer: Any) -> int:
    """A number unique to a writer object for the process (ids get reused)."""
    token = getattr(writer, "_gradscope_token", None)
    if token is None:
        token = next(_tokens)
        writer._gradscope_token = token
    return token
