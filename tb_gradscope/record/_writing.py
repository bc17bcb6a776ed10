"""Where records go: the recorder's own file writer or the user's default one.

TF2's summary writer repeats a summary's metadata on every event, so the full
metadata is written only on a tag's first write to each writer through this
sink and b"" afterwards (TensorBoard keeps a tag's first metadata). Which
(writer, tag) pairs were written is in-graph state (a string variable), so one
trace serves every step; it is
deliberately kept out of checkpoints, since a resumed run starts a new event
file that needs the metadata again.

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
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.record import _distribute as distribute
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._event_file import EventFile

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
            first = tf.logical_not(tf.reduce_any(tf.equal(tf.reshape(seen, [-1, 1]), keys), axis=0))
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
