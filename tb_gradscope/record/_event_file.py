"""The sink's own event file on the host: its health, and what is done when it fails.

TF's summary writer says nothing when its event file is deleted, and when the
disk is full its flush fails *inside the training step*. So the recorder's
own writer never flushes by itself (see `writing`), and `EventFile.flush`
flushes it from the host after checking the file can take the queued records
(it exists and is writable, the disk and RLIMIT_FSIZE leave room). If it
cannot, it warns once and holds them, checking again at every flush, and
flushes them once the fault heals. Held records are bounded
(MAX_HELD_RECORDS): beyond that, and when the file itself is gone (a deleted
logdir), the queued steps are dropped, writing goes on in a new event file,
and an EVENTS record (`dropped`) there says which steps are missing and why.
No event file is left empty, and a new file always sorts after the one it
follows (`_wait_past`), so TensorBoard, which follows a run's last file, reads it.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import resource
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope import format as fmt
from tb_gradscope.core.warn import warn_once

# Records held in memory while the event file cannot take them; beyond this
# the held steps are dropped (and the drop recorded once writing works again).
MAX_HELD_RECORDS = 20_000
# Room the disk (and RLIMIT_FSIZE) must leave beyond the queued records'
# estimated size before a flush is tried: a flush that fails midway leaves a
# record cut short, past which TensorBoard reads nothing in that file.
HEADROOM_BYTES = 1 << 20
_NEVER = 2**31 - 1
DROPPED_TAG = fmt.tag_for(fmt.Kind.EVENTS, "dropped")

Steps = tuple[int, int, int]  # (first step, last step, records)


class EventFile:
    """The host side of one file writer that never flushes by itself.

    Args:
      logdir: the directory the event files go to (created if missing).
      name: the recorder's name, used in messages.
      forget_tags: called when a new event file is opened, so every tag's
        metadata is written again in it.
    """

    def __init__(self, logdir: str, name: str, forget_tags: Callable[[], None]):
        self.logdir = logdir
        self.name = name
        self._forget_tags = forget_tags
        before = set(_event_files(logdir))
        self.writer = _create_writer(logdir, name)
        self._file = _newest(set(_event_files(logdir)) - before)
        self._latest = self._file  # the last file opened in the logdir
        self._size = _size(self._file)
        self.queued = 0  # records in the writer's queue since the last flush
        self._last_flush = time.monotonic()
        self.losses = 0  # faults seen (event file gone, not writable, no room, not growing)
        self.reopened = 0
        self.dropped: list[Steps] = []  # never written
        self._pending: list[Steps] = []  # the same, of the records queued since the last flush
        self._unreported: list[Steps] = []  # dropped, not yet written as an event
        self.fault: str | None = None  # why records are held, while they are
        self._reason = ""  # the first problem of the latest fault
        self._bytes_per_record = 4096.0
        self._scratch: str | None = None  # where records go while detached from the logdir
        self._detached_records = 0

    def queue(self, first: int, step: int, records: int) -> None:
        """Counts `records` records written to the writer's queue at steps first..step."""
        self.queued += records
        if records:
            self._pending.append((first, step, records))

    def since_flush(self) -> float:
        """Seconds since the last successful flush."""
        return time.monotonic() - self._last_flush

    def flush(self, step: int | None = None) -> None:
        """Flushes the queued records if the event file can take them; else
        holds them (or drops them, past MAX_HELD_RECORDS or with the file gone).
        `step`: where a `dropped` event may be written (None: not now)."""
        if self._file is None:  # detached: the records went to a scratch file
            self._detached_records += self.queued
            self._drop()
            if not self._open_in_logdir(step):
                return
        problem = self._cannot_take()
        if problem is not None:
            gone = not os.path.exists(self._file)
            self._note_fault(problem, held=not gone)
            if gone or self.queued > MAX_HELD_RECORDS:
                self._drop()
                self._open_in_logdir(step)
            return
        queued, before = self.queued, self._size
        try:
            self.writer.flush()
            failure = None
        except tf.errors.OpError as e:
            text = (getattr(e, "message", "") or str(e)).strip().splitlines()[0]
            failure = re.sub(r"\{\{[^}]*\}\}\s*", "", text)  # TF's op prefix
        size = _size(self._file)
        if failure is not None or size is None or (queued and size <= before):
            # Written nowhere, or cut short midway (TensorBoard would read
            # nothing after it): those steps are lost, a new file goes on.
            self._note_fault(
                f"its event file stopped growing ({failure or 'no error'}; disk full?)", held=False
            )
            self._drop()
            self._open_in_logdir(step)
            return
        if queued:
            self._bytes_per_record = max(64.0, (size - before) / queued)
        self._size, self.queued, self._last_flush = size, 0, time.monotonic()
        self._pending.clear()
        self.fault = None
        if self._unreported and step is not None:
            self._write_dropped(step)

    def close(self) -> None:
        """Flushes what the file can take, closes the writer, removes an empty file."""
        self.flush()
        if self.fault and self._file is not None and self.queued:
            warn_once(
                ("close_failed", self.logdir),
                f"Recorder '{self.name}': closing while {self.fault}; the "
                f"{self.queued} records held in memory are lost",
            )
        try:
            self.writer.close()
        except tf.errors.OpError as e:
            warn_once(
                ("close_failed", self.logdir),
                f"Recorder '{self.name}': closing the event file failed ({e}); "
                "its last records are lost",
            )
        if self._file and _size(self._file) == 0:
            with contextlib.suppress(OSError):
                os.remove(self._file)
        if self._scratch:
            shutil.rmtree(self._scratch, ignore_errors=True)

    def _cannot_take(self) -> str | None:
        """Why the event file cannot take the queued records now, or None."""
        if not os.path.exists(self._file):
            return f"no event file left in '{self.logdir}' (deleted or moved?)"
        if not os.access(self._file, os.W_OK):
            return f"its event file in '{self.logdir}' is read-only"
        return _no_room(
            self._file, self._size or 0, HEADROOM_BYTES + self.queued * self._bytes_per_record
        )

    def _note_fault(self, problem: str, held: bool = True) -> None:
        """Warns once about a fault; `held`: the queued records can wait for it
        to heal (else they are lost with the file)."""
        if self.fault is None:
            self.losses += 1
            self._reason = problem
        self.fault = problem
        then = (
            f"the recorder keeps up to {MAX_HELD_RECORDS} records in memory and writes them when it can"
            if held
            else "records written since are lost (since the last flush); the recorder goes on in a new event file"
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
        self.queued = 0

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
            private.close_writer_file(self.writer)
        before = set(_event_files(self.logdir)) if logdir_ok else set()
        opened = False
        if logdir_ok:
            _wait_past(self._latest)
            with contextlib.suppress(tf.errors.OpError):
                _open_file(self.writer, self.logdir)
                opened = True
        scratch, self._scratch = self._scratch, None
        if not opened:
            self._scratch = tempfile.mkdtemp(prefix="gradscope_held_")
            _open_file(self.writer, self._scratch)
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)
        self._forget_tags()  # metadata again in the new file
        self._file = _newest(set(_event_files(self.logdir)) - before) if opened else None
        self._latest = self._file or self._latest
        self._size = _size(self._file) or 0
        if abandoned and abandoned != self._file and _size(abandoned) == 0:
            with contextlib.suppress(OSError):
                os.remove(abandoned)
        if opened:
            self.fault = None
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
        # Straight to this writer, not through its as_default(): its exit adds a flush.
        with private.default_writer_set(self.writer):
            tf.summary.write(
                DROPPED_TAG,
                tf.constant(fmt.encode_blobs(info, [event.to_json()])),
                step=step,
                metadata=fmt.create_summary_metadata(info).SerializeToString(),
            )
        self._unreported.clear()


def _event_files(logdir: str) -> list[str]:
    return glob.glob(os.path.join(glob.escape(logdir), "*tfevents*"))


def _wait_past(path: str | None) -> None:
    """Sleeps until the wall clock leaves the second stamped in `path`'s name
    (at most a second, and only when a file is reopened within the second it
    was opened in). TF names a file `events.out.tfevents.<seconds>.<host>.<pid>.<n>`
    with `n` counted per process, so in the same second file 10 sorts before
    file 9, and TensorBoard, which moves on only to names after the file it
    reads, would never read the new one."""
    stamp = re.search(r"tfevents\.(\d+)\.", os.path.basename(path or ""))
    if stamp is not None:
        time.sleep(min(1.0, max(0.0, int(stamp.group(1)) + 1 - time.time())))


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
        return (
            f"its event file reached the file size limit (RLIMIT_FSIZE {limit} bytes; disk full?)"
        )
    return None


def _size(path: str | None) -> int | None:
    try:
        return os.path.getsize(path) if path else None
    except OSError:
        return None


def _open_file(writer: Any, logdir: str) -> None:
    """(Re)creates the file writer behind `writer`'s resource: a new event file."""
    private.open_writer_file(
        writer, logdir, max_queue=_NEVER, flush_millis=_NEVER, filename_suffix=".v2"
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
