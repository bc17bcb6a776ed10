"""Where records go: the recorder's own file writer or the user's default one.

TF2's summary writer repeats a summary's metadata on every event, so the full
metadata is written only on a tag's first write to each writer through this
sink and b"" afterwards (TensorBoard keeps a tag's first metadata). Which
(writer, tag) pairs were written is in-graph state (a string variable), so one
trace serves every step; it is
deliberately kept out of checkpoints, since a resumed run starts a new event
file that needs the metadata again.

Silent data loss. TF's writer says nothing when its event file is deleted, and
when the disk is full its flush fails *inside the training step* (the step
raises OutOfRangeError: "File too large"), which would let the recorder kill
training. So the sink's own writer never flushes by itself (huge queue and
interval): a host callback (`tf.py_function`, at recorded steps only, gated
in-graph so it runs only when a flush is due) flushes it every FLUSH_SECS or
FLUSH_RECORDS, catching
errors, and checks the event file is still there and growing. When it is not,
it warns once and reopens: a new event file (metadata written again) in the
logdir, recreated if needed, so later steps are readable. Records queued
while the file was lost are lost; the warning says so.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import re
import tempfile
import time
from typing import Any, Callable, Iterator, Sequence

import tensorflow as tf
from tensorflow.python.framework import config as tf_config  # no public API for these
from tensorflow.python.ops import gen_summary_ops, summary_ops_v2


from tb_gradscope.record import distribute
from tb_gradscope.record.warn import warn_once


# The own writer flushes from the host callback only: every FLUSH_SECS, or when
# FLUSH_RECORDS records are queued.
FLUSH_SECS = 2.0
FLUSH_RECORDS = 200
_NEVER = 2**31 - 1


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
        if logdir is not None and self.chief:
            before = set(_event_files(logdir))
            self._writer = _create_writer(logdir, name)
            self._file = _newest(set(_event_files(logdir)) - before)
            self._size = _size(self._file)
            self._queued = 0
            self._last_flush = time.monotonic()
            # The in-graph gate of the host callback (`_tick`); one device, never
            # mirrored (only the chief has them).
            self._unticked = distribute.local_variable(0, dtype=tf.int64, trainable=False, name="unticked")
            self._tick_after = distribute.local_variable(0.0, dtype=tf.float64, trainable=False, name="tick_after")
            self.losses = 0  # times the event file was found gone or not growing
            self.reopened = 0

    @contextlib.contextmanager
    def as_default(self) -> Iterator[None]:
        """The writer records go to; raises NoWriterError when there is none."""
        if self._writer is not None:
            # Not writer.as_default(): its exit adds a flush op to the traced
            # step, which raises inside the step when the disk is full.
            state = summary_ops_v2._summary_state  # noqa: SLF001
            previous, state.writer = state.writer, self._writer
            try:
                yield
            finally:
                state.writer = previous
            return
        if not summary_ops_v2.has_default_writer():
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
            key = f"{_writer_token(summary_ops_v2._summary_state.writer)}:{tag}"  # noqa: SLF001
            first = tf.logical_not(tf.reduce_any(tf.equal(self._written, key)))
            condition = tf.logical_and(record, first) if once else record
            with tf.summary.record_if(condition):
                meta = tf.where(first, tf.constant(metadata), tf.constant(b""))
                written = tf.summary.write(tag, value, step=step, metadata=meta)
            mark = tf.logical_and(written, first)
            done = tf.cond(mark, lambda: self._mark(key), lambda: written)
            if self._writer is None:
                return done
            return tf.cond(done, self._tick, lambda: done)

    def write_due(self, records: Sequence[tuple[str, bytes, Any, bool]], step: tf.Tensor) -> tf.Tensor:
        """Writes records already known to be due: (tag, metadata, value, once) each.

        For use inside the recorded-step branch, where a per-record predicate
        and `record_if` would only cost ops: the written-tags list is read once,
        updated once, and the host callback runs once for all the records.
        Returns True.
        """
        if not records:
            return tf.constant(True)
        if not self.chief:  # computes what the chief writes (see `_compute_only`)
            with tf.control_dependencies([value for _, _, value, _ in records]):
                return tf.constant(True)
        with self.as_default():
            token = _writer_token(summary_ops_v2._summary_state.writer)  # noqa: SLF001
            seen = self._written.read_value()
            keys, firsts = [], []
            for tag, metadata, value, once in records:
                key = f"{token}:{tag}"
                first = tf.logical_not(tf.reduce_any(tf.equal(seen, key)))
                with tf.summary.record_if(first if once else True):
                    meta = tf.where(first, tf.constant(metadata), tf.constant(b""))
                    written = tf.summary.write(tag, value, step=step, metadata=meta)
                keys.append(key)
                firsts.append(tf.logical_and(written, first))
            new = tf.boolean_mask(tf.constant(keys), tf.stack(firsts))
            self._written.assign(tf.concat([seen, new], 0))
            if self._writer is not None:
                self._tick(len(records))
        return tf.constant(True)

    def _tick(self, records: int = 1) -> tf.Tensor:
        """In-graph: counts `records` written records and, when a flush is due
        (FLUSH_SECS since the last callback, or FLUSH_RECORDS records), runs the
        host callback; returns True. The gate keeps the callback, which costs
        more than a small step, off most recorded steps. TF refuses its clock
        op under op determinism: there every call runs the callback."""
        queued = self._unticked.assign_add(records)
        if tf_config.is_op_determinism_enabled():
            return self._host_tick_op()
        due = tf.logical_or(tf.timestamp() >= self._tick_after, queued >= FLUSH_RECORDS)
        return tf.cond(due, self._host_tick_op, lambda: tf.constant(True))

    def _host_tick_op(self) -> tf.Tensor:
        # The writer's handle as input orders the callback with the step's
        # other writes to it (automatic control dependencies on resources).
        tf.py_function(self._host_tick, [self._writer._resource, self._unticked.read_value()], [])  # noqa: SLF001
        self._unticked.assign(0)
        if not tf_config.is_op_determinism_enabled():
            self._tick_after.assign(tf.timestamp() + FLUSH_SECS)
        return tf.constant(True)

    def _host_tick(self, _handle: Any, records: Any) -> None:
        self._queued += int(records)
        if self._queued >= FLUSH_RECORDS or time.monotonic() - self._last_flush >= FLUSH_SECS:
            self._flush_and_check()

    def _flush_and_check(self) -> None:
        """Flushes the own writer; warns and reopens if the file is gone or stuck."""
        queued, self._queued, self._last_flush = self._queued, 0, time.monotonic()
        try:
            self._writer.flush()
            failure = None
        except tf.errors.OpError as e:
            text = (getattr(e, "message", "") or str(e)).strip().splitlines()[0]
            failure = re.sub(r"\{\{[^}]*\}\}\s*", "", text)  # TF's op prefix
        size = _size(self._file)
        if size is None:
            problem = f"no event file left in '{self.logdir}' (deleted or moved?)"
        elif failure is not None:
            problem = f"its event file stopped growing ({failure}; disk full?)"
        elif queued and size <= self._size:
            problem = "its event file stopped growing (disk full?)"
        else:
            self._size = size
            return
        self.losses += 1
        warn_once(
            ("event_file_lost", self.logdir),
            f"Recorder '{self.name}': {problem}; records written since are lost "
            f"(since the last flush). Training goes on; the recorder opens a new "
            f"event file in '{self.logdir}' and keeps trying while writing fails.",
        )
        self._reopen()

    def _reopen(self) -> None:
        """A new event file on the same writer resource (traced steps keep it).

        The resource must exist after this, or the step's next write fails:
        the old file is closed only once the logdir is writable, and if the
        new file still cannot be made, the writer writes to a scratch
        directory until the next attempt.
        """
        abandoned = self._file
        try:
            os.makedirs(self.logdir, exist_ok=True)
            if not os.access(self.logdir, os.W_OK | os.X_OK):
                return
        except OSError:
            return  # keep the old writer (its writes are lost) and try again later
        with contextlib.suppress(tf.errors.OpError):
            gen_summary_ops.close_summary_writer(self._writer._resource)  # noqa: SLF001
        before = set(_event_files(self.logdir))
        try:
            _open_file(self._writer, self.logdir)
        except tf.errors.OpError:
            _open_file(self._writer, tempfile.mkdtemp(prefix="gradscope_lost_"))
            self._file, self._size = None, 0
            return
        self._written.assign(tf.constant([], tf.string))  # metadata again in the new file
        self._file = _newest(set(_event_files(self.logdir)) - before) or abandoned
        self._size = _size(self._file) or 0
        self.reopened += 1
        if abandoned and abandoned != self._file and _size(abandoned) == 0:
            with contextlib.suppress(OSError):
                os.remove(abandoned)

    def _mark(self, key: str) -> tf.Tensor:
        self._written.assign(tf.concat([self._written, [key]], 0))
        return tf.constant(True)

    def flush(self) -> None:
        """Flushes the writer; warns when the own event file has disappeared."""
        if self._writer is not None:
            self._flush_and_check()
        elif self.chief and summary_ops_v2.has_default_writer():
            tf.summary.flush()

    def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.close()
            except tf.errors.OpError as e:
                warn_once(("close_failed", self.logdir),
                          f"Recorder '{self.name}': closing the event file failed ({e}); "
                          "its last records are lost")


def _compute_only(value: Any, record: tf.Tensor) -> tf.Tensor:
    """A non-chief's write: computes what the chief's would, writes nothing.

    Under MultiWorkerMirroredStrategy the tables of a step hold cross-worker
    reductions (collectives): every worker must build and run the same ones,
    at the same steps, or the chief's wait forever. Returns False.
    """
    if not callable(value):
        return tf.constant(False)
    if tf.executing_eagerly():
        if bool(record):
            value()
        return tf.constant(False)

    def compute() -> tf.Tensor:
        with tf.control_dependencies(tf.nest.flatten(value())):
            return tf.constant(False)

    return tf.cond(record, compute, lambda: tf.constant(False))


_tokens = itertools.count()


def _writer_token(writer: Any) -> int:
    """A number unique to a writer object for the process (ids get reused)."""
    token = getattr(writer, "_gradscope_token", None)
    if token is None:
        token = next(_tokens)
        writer._gradscope_token = token
    return token


def _event_files(logdir: str) -> list[str]:
    return glob.glob(os.path.join(glob.escape(logdir), "*tfevents*"))


def _newest(paths: set[str]) -> str | None:
    return max(paths, default=None)


def _size(path: str | None) -> int | None:
    try:
        return os.path.getsize(path) if path else None
    except OSError:
        return None


def _open_file(writer: Any, logdir: str) -> None:
    """(Re)creates the file writer behind `writer`'s resource: a new event file."""
    gen_summary_ops.create_summary_file_writer(
        writer._resource, logdir=logdir, max_queue=_NEVER, flush_millis=_NEVER,  # noqa: SLF001
        filename_suffix=".v2",
    )


def _create_writer(logdir: str, name: str) -> Any:
    try:
        with tf.init_scope():
            return tf.summary.create_file_writer(logdir, max_queue=_NEVER, flush_millis=_NEVER)
    except (tf.errors.OpError, OSError) as e:
        message = getattr(e, "message", str(e))
        raise ValueError(
            f"Recorder '{name}' cannot write to logdir '{logdir}' ({message.strip()}); "
            "pass a directory you can create and write to"
        ) from None
