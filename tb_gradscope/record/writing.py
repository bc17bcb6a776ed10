"""Where records go: the recorder's own file writer or the user's default one.

TF2's summary writer repeats a summary's metadata on every event, so the full
metadata is written only on a tag's first write to each writer through this
sink and b"" afterwards (TensorBoard keeps a tag's first metadata). Which
(writer, tag) pairs were written is in-graph state (a string variable), so one
trace serves every step; it is
deliberately kept out of checkpoints, since a resumed run starts a new event
file that needs the metadata again.
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
from typing import Any, Callable, Iterator

import tensorflow as tf
from tensorflow.python.ops import summary_ops_v2  # has_default_writer: no public API

from tb_gradscope.record.warn import warn_once


class NoWriterError(RuntimeError):
    """A record is due but there is no summary writer to write it to."""


class SummarySink:
    """Writes tb_gradscope records to one event-file writer.

    Args:
      logdir: a directory for the sink's own writer, or None to use the user's
        default `tf.summary` writer at the time each write is traced.
      name: the recorder's name, used in messages.
    """

    def __init__(self, logdir: str | None, name: str):
        self.name = name
        self.logdir = logdir
        self._writer = None
        if logdir is not None:
            self._writer = _create_writer(logdir, name)
        with tf.init_scope():
            self._written = tf.Variable(
                tf.constant([], tf.string),
                shape=tf.TensorShape([None]),
                trainable=False,
                name="written_tags",
            )

    @contextlib.contextmanager
    def as_default(self) -> Iterator[None]:
        """The writer records go to; raises NoWriterError when there is none."""
        if self._writer is not None:
            with self._writer.as_default():
                yield
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
        with self.as_default():
            # Per writer: a user who switches default writers starts a new file.
            key = f"{_writer_token(summary_ops_v2._summary_state.writer)}:{tag}"  # noqa: SLF001
            first = tf.logical_not(tf.reduce_any(tf.equal(self._written, key)))
            condition = tf.logical_and(record, first) if once else record
            with tf.summary.record_if(condition):
                meta = tf.where(first, tf.constant(metadata), tf.constant(b""))
                written = tf.summary.write(tag, value, step=step, metadata=meta)
            mark = tf.logical_and(written, first)
            return tf.cond(mark, lambda: self._mark(key), lambda: written)

    def _mark(self, key: str) -> tf.Tensor:
        self._written.assign(tf.concat([self._written, [key]], 0))
        return tf.constant(True)

    def flush(self) -> None:
        """Flushes the writer; warns when the own event file has disappeared."""
        if self._writer is not None:
            self._writer.flush()
            if not glob.glob(os.path.join(glob.escape(self.logdir), "*tfevents*")):
                warn_once(
                    ("event_file_gone", self.logdir),
                    f"Recorder '{self.name}': no event file left in "
                    f"'{self.logdir}' (deleted or moved?); records written since "
                    "are lost. Keep the logdir in place while training, or "
                    "create a new Recorder to start a new event file.",
                )
        elif summary_ops_v2.has_default_writer():
            tf.summary.flush()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


_tokens = itertools.count()


def _writer_token(writer: Any) -> int:
    """A number unique to a writer object for the process (ids get reused)."""
    token = getattr(writer, "_gradscope_token", None)
    if token is None:
        token = next(_tokens)
        writer._gradscope_token = token
    return token


def _create_writer(logdir: str, name: str) -> Any:
    try:
        with tf.init_scope():
            return tf.summary.create_file_writer(logdir)
    except (tf.errors.OpError, OSError) as e:
        message = getattr(e, "message", str(e))
        raise ValueError(
            f"Recorder '{name}' cannot write to logdir '{logdir}' ({message.strip()}); "
            "pass a directory you can create and write to"
        ) from None
