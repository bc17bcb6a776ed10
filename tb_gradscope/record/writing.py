"""Where records go: the recorder's own file writer or the user's default one.

TF2's summary writer repeats a summary's metadata on every event, so the full
metadata is written only on a tag's first write to each writer through this
sink and b"" afterwards (TensorBoard keeps a tag's first metadata). Which
(writer, tag) pairs were written is in-graph state (a string variable), so one
trace serves every step; it is
deliberately kept out of checkpoints, since a resumed run starts a new event
file that needs the metadata again.

Faults. TF's writer says nothing when its event file is deleted, and when the
disk is full its flush fails *inside the training step* (the step raises
OutOfRangeError: "File too large"), which would let the recorder kill
training. So the sink's own writer never flushes by itself (huge queue and
interval): its records wait in the writer's queue, in memory, until a host
callback (`tf.py_function`, at recorded steps only, gated in-graph so it runs
only when a flush is due) flushes them every FLUSH_SECS or FLUSH_RECORDS.
Before flushing, the callback checks the event file can take them (it exists
and is writable, the disk and RLIMIT_FSIZE leave room): if not, it warns once
and holds them, checking again at every recorded step, and flushes them once
the fault heals. Held records are bounded (MAX_HELD_RECORDS): beyond that,
and when the file itself is gone (a deleted logdir), the queued steps are
dropped, recording goes on in a new event file, and an EVENTS record
(`dropped`) there says which steps are missing and why. No event file is left
empty.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import re
import resource
import shutil
import tempfile
import time
from typing import Any, Callable, Iterator, Sequence

import tensorflow as tf
from tensorflow.python.framework import config as tf_config  # no public API for these
from tensorflow.python.ops import gen_summary_ops, summary_ops_v2


from tb_gradscope import format as fmt
from tb_gradscope.record import distribute
from tb_gradscope.record.warn import warn_once


# The own writer flushes from the host callback only: every FLUSH_SECS, or when
# FLUSH_RECORDS records are queued.
FLUSH_SECS = 2.0
FLUSH_RECORDS = 200
# Records held in memory while the event file cannot take them; beyond this
# the held steps are dropped (and the drop recorded once writing works again).
MAX_HELD_RECORDS = 20_000
# Room the disk (and RLIMIT_FSIZE) must leave beyond the queued records'
# estimated size before a flush is tried: a flush that fails midway leaves a
# record cut short, past which TensorBoard reads nothing in that file.
HEADROOM_BYTES = 1 << 20
_NEVER = 2**31 - 1
DROPPED_TAG = fmt.tag_for(fmt.Kind.EVENTS, "dropped")


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
            self._first_step = distribute.local_variable(0, dtype=tf.int64, trainable=False, name="first_unticked_step")
            self.losses = 0  # faults seen (event file gone, not writable, no room, not growing)
            self.reopened = 0
            self.dropped: list[tuple[int, int, int]] = []  # (first step, last step, records) never written
            self._pending: list[tuple[int, int, int]] = []  # the same, of the records queued since the last flush
            self._unreported: list[tuple[int, int, int]] = []  # dropped, not yet written as an event
            self._fault: str | None = None  # why records are held, while they are
            self._reason = ""  # the first problem of the latest fault
            self._bytes_per_record = 4096.0
            self._scratch: str | None = None  # where records go while detached from the logdir
            self._detached_records = 0

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
            return tf.cond(done, lambda: self._tick(1, step), lambda: done)

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
                self._tick(len(records), step)
        return tf.constant(True)

    def _tick(self, records: int, step: tf.Tensor) -> tf.Tensor:
        """In-graph: counts `records` written records and, when a flush is due
        (FLUSH_SECS since the last callback, or FLUSH_RECORDS records, or every
        recorded step while records are held), runs the host callback; returns
        True. The gate keeps the callback, which costs more than a small step,
        off most recorded steps. TF refuses its clock op under op determinism:
        there every call runs the callback."""
        step = tf.cast(step, tf.int64)
        queued = self._unticked.assign_add(records)
        self._first_step.assign(tf.where(tf.equal(queued, records), step, self._first_step))
        if tf_config.is_op_determinism_enabled():
            return self._host_tick_op(step)
        due = tf.logical_or(tf.timestamp() >= self._tick_after, queued >= FLUSH_RECORDS)
        return tf.cond(due, lambda: self._host_tick_op(step), lambda: tf.constant(True))

    def _host_tick_op(self, step: tf.Tensor) -> tf.Tensor:
        # The writer's handle as input orders the callback with the step's
        # other writes to it (automatic control dependencies on resources).
        wait = tf.py_function(
            self._host_tick,
            [self._writer._resource, self._unticked.read_value(), self._first_step.read_value(), step],  # noqa: SLF001
            tf.float64,
        )
        self._unticked.assign(0)
        if not tf_config.is_op_determinism_enabled():
            self._tick_after.assign(tf.timestamp() + wait)
        return tf.constant(True)

    def _host_tick(self, _handle: Any, records: Any, first: Any, step: Any) -> float:
        """Counts the records written at steps first..step; flushes when due.
        Returns the seconds until the next callback is due (0 while records
        are held, so a heal is seen at the next recorded step)."""
        self._queued += int(records)
        if int(records):
            self._pending.append((int(first), int(step), int(records)))
        if self._fault or self._queued >= FLUSH_RECORDS or time.monotonic() - self._last_flush >= FLUSH_SECS:
            self._flush_and_check(int(step))
        return 0.0 if self._fault else FLUSH_SECS

    def _flush_and_check(self, step: int | None = None) -> None:
        """Flushes the queued records if the event file can take them; else
        holds them (or drops them, past MAX_HELD_RECORDS or with the file gone)."""
        if self._file is None:  # detached: the records went to a scratch file
            self._detached_records += self._queued
            self._drop()
            if not self._open_in_logdir(step):
                return
        problem = self._cannot_take()
        if problem is not None:
            gone = not os.path.exists(self._file)
            self._note_fault(problem, held=not gone)
            if gone or self._queued > MAX_HELD_RECORDS:
                self._drop()
                self._open_in_logdir(step)
            return
        queued, before = self._queued, self._size
        try:
            self._writer.flush()
            failure = None
        except tf.errors.OpError as e:
            text = (getattr(e, "message", "") or str(e)).strip().splitlines()[0]
            failure = re.sub(r"\{\{[^}]*\}\}\s*", "", text)  # TF's op prefix
        size = _size(self._file)
        if failure is not None or size is None or (queued and size <= before):
            # Written nowhere, or cut short midway (TensorBoard would read
            # nothing after it): those steps are lost, a new file goes on.
            self._note_fault(f"its event file stopped growing ({failure or 'no error'}; disk full?)", held=False)
            self._drop()
            self._open_in_logdir(step)
            return
        if queued:
            self._bytes_per_record = max(64.0, (size - before) / queued)
        self._size, self._queued, self._last_flush = size, 0, time.monotonic()
        self._pending.clear()
        self._fault = None
        if self._unreported and step is not None:
            self._write_dropped(step)

    def _cannot_take(self) -> str | None:
        """Why the event file cannot take the queued records now, or None."""
        if not os.path.exists(self._file):
            return f"no event file left in '{self.logdir}' (deleted or moved?)"
        if not os.access(self._file, os.W_OK):
            return f"its event file in '{self.logdir}' is read-only"
        return _no_room(self._file, self._size or 0, HEADROOM_BYTES + self._queued * self._bytes_per_record)

    def _note_fault(self, problem: str, held: bool = True) -> None:
        """Warns once about a fault; `held`: the queued records can wait for it
        to heal (else they are lost with the file)."""
        if self._fault is None:
            self.losses += 1
            self._reason = problem
        self._fault = problem
        then = (
            f"the recorder keeps up to {MAX_HELD_RECORDS} records in memory and writes them when it can"
            if held else
            "records written since are lost (since the last flush); the recorder goes on in a new event file"
        )
        warn_once(
            ("event_file_fault", self.logdir),
            f"Recorder '{self.name}': {problem}. Training goes on; {then}, and records "
            "which steps it had to drop.",
        )

    def _drop(self) -> None:
        """Counts the queued records' steps as dropped: they are lost with the
        writer's queue when it is closed, or flushed into a scratch file."""
        self.dropped += self._pending
        self._unreported += self._pending
        self._pending.clear()
        self._queued = 0

    def _open_in_logdir(self, step: int | None) -> bool:
        """Closes the current file and opens a new one on the same writer
        resource (traced steps keep it): in the logdir when it can take one,
        else in a scratch directory (records there are dropped). True when
        the new file is in the logdir. The resource exists after this, or the
        step's next write would fail."""
        abandoned = self._file
        logdir_ok = self._logdir_can_take_a_file()
        if self._file is None and not logdir_ok and self._detached_records <= MAX_HELD_RECORDS:
            return False  # already detached: keep the scratch file
        self._detached_records = 0
        with contextlib.suppress(tf.errors.OpError):
            gen_summary_ops.close_summary_writer(self._writer._resource)  # noqa: SLF001
        before = set(_event_files(self.logdir)) if logdir_ok else set()
        opened = False
        if logdir_ok:
            with contextlib.suppress(tf.errors.OpError):
                _open_file(self._writer, self.logdir)
                opened = True
        scratch, self._scratch = self._scratch, None
        if not opened:
            self._scratch = tempfile.mkdtemp(prefix="gradscope_held_")
            _open_file(self._writer, self._scratch)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        self._written.assign(tf.constant([], tf.string))  # metadata again in the new file
        self._file = _newest(set(_event_files(self.logdir)) - before) if opened else None
        self._size = _size(self._file) or 0
        if abandoned and abandoned != self._file and _size(abandoned) == 0:
            with contextlib.suppress(OSError):
                os.remove(abandoned)
        if opened:
            self._fault = None
            self.reopened += 1
            if step is not None and self._unreported:
                self._write_dropped(step)
        return opened

    def _logdir_can_take_a_file(self) -> bool:
        try:
            os.makedirs(self.logdir, exist_ok=True)
        except OSError:
            return False
        if not os.access(self.logdir, os.W_OK | os.X_OK):
            return False
        return _no_room(self.logdir, 0, HEADROOM_BYTES) is None

    def _write_dropped(self, step: int) -> None:
        """An EVENTS record at `step` saying which recorded steps are missing."""
        first = min(f for f, _, _ in self._unreported)
        last = max(s for _, s, _ in self._unreported)
        records = sum(n for _, _, n in self._unreported)
        event = fmt.Event(
            type=fmt.DROPPED,
            name="records_not_written",
            step=step,
            message=(
                f"{records} record(s) of the recorded steps {first}..{last} could not be "
                f"written ({self._reason}); those steps are missing from this run"
            ),
            evidence={"records": records, "first_step": first, "last_step": last},
        )
        info = fmt.make_info(fmt.Kind.EVENTS, "dropped", attrs={"recorder": self.name})
        with self.as_default():
            tf.summary.write(
                DROPPED_TAG, tf.constant(fmt.encode_blobs(info, [event.to_json()])), step=step,
                metadata=fmt.create_summary_metadata(info).SerializeToString(),
            )
        self._unreported.clear()

    def _mark(self, key: str) -> tf.Tensor:
        self._written.assign(tf.concat([self._written, [key]], 0))
        return tf.constant(True)

    def flush(self) -> None:
        """Flushes the writer if its event file can take the records (else
        they are held, as at a recorded step)."""
        if self._writer is not None:
            self._flush_and_check()
        elif self.chief and summary_ops_v2.has_default_writer():
            tf.summary.flush()

    def close(self) -> None:
        if self._writer is None:
            return
        self._flush_and_check()
        if self._fault and self._file is not None and self._queued:
            warn_once(("close_failed", self.logdir),
                      f"Recorder '{self.name}': closing while {self._fault}; the "
                      f"{self._queued} records held in memory are lost")
        try:
            self._writer.close()
        except tf.errors.OpError as e:
            warn_once(("close_failed", self.logdir),
                      f"Recorder '{self.name}': closing the event file failed ({e}); "
                      "its last records are lost")
        if self._file and _size(self._file) == 0:
            with contextlib.suppress(OSError):
                os.remove(self._file)
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)


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


def _no_room(path: str, size: int, need: float) -> str | None:
    """Why `need` more bytes would not fit a file of `size` bytes at `path`
    (disk space, RLIMIT_FSIZE), or None."""
    try:
        disk = os.statvfs(path)
    except OSError:
        return None
    free = disk.f_bavail * disk.f_frsize
    if free < need:
        return f"the disk of '{path}' is full ({free} bytes free)"
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    if limit != resource.RLIM_INFINITY and size + need > limit:
        return f"its event file reached the file size limit (RLIMIT_FSIZE {limit} bytes; disk full?)"
    return None


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
