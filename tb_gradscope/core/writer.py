"""Writes gradscope records from numpy values into a TensorBoard event file.

Used by every recorder that computes its tables outside a summary op: the TF1
`GraphRecorder` (tables fetched with the user's `Session.run`) and the PyTorch
`Recorder`. Each tag carries its full SummaryMetadata on its first event in
the file (TensorBoard keeps the first metadata it sees).

An event file is a TFRecord file of serialized `Event` protos. The default
framing is TensorBoard's (`crc.FramedRecords`: the bytes of TensorBoard's
`RecordWriter`, its CRCs in C through `google-crc32c`; no TensorFlow). A
caller may pass its own record file (`open_records`): TF1 passes
`tf.io.TFRecordWriter`, the same bytes. No writer thread:
records reach the disk at `flush` (the recorder flushes when a recorded step
is complete).
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.util import tensor_util

from tb_gradscope.core.crc import FramedRecords
from tb_gradscope.core.warn import warn_once
from tb_gradscope.format import (
    RecordInfo,
    create_summary_metadata,
    encode_blobs,
    encode_table,
    tag_for,
)

FILE_SUFFIX = ".gradscope"
_FILE_NUMBERS = itertools.count()  # two writers in one second get two files


class RecordFile(Protocol):
    """Where framed records go: `write(bytes)` one record, `flush()`, `close()`."""

    def write(self, record: bytes) -> None: ...
    def flush(self) -> None: ...
    def close(self) -> None: ...


def tensorboard_records(path: str) -> RecordFile:
    """TensorBoard's framing (length, masked CRC32C) over a new file at `path`,
    its CRCs computed in C by `crc.FramedRecords` (the same bytes)."""
    return FramedRecords(path)


class RecordWriter:
    """One event file of gradscope records in `logdir` (created if needed).

    Args:
      logdir: the run directory.
      writer: the `source_metadata.writer` of the file (who wrote it).
      open_records: path -> RecordFile (default: TensorBoard's framing).

    A deleted or moved logdir makes the file writer lose data without an
    error, so every write checks that the file is still there and warns once
    when it is not.
    """

    def __init__(
        self,
        logdir: str,
        writer: str = "tb_gradscope",
        open_records: Callable[[str], RecordFile] = tensorboard_records,
    ):
        os.makedirs(logdir, exist_ok=True)
        self._logdir = logdir
        self._path = _new_path(logdir)
        self._file = open_records(self._path)
        self._tags_with_metadata: set[str] = set()
        self._layouts: dict[tuple[str, str], list[tuple[str, ...]]] = {}
        self._unflushed = False
        first = event_pb2.Event(
            wall_time=time.time(),
            file_version="brain.Event:2",
            source_metadata=event_pb2.SourceMetadata(writer=writer),
        )
        self._file.write(first.SerializeToString())
        self._file.flush()

    @property
    def path(self) -> str:
        """The event file being written."""
        return self._path

    def write_table(self, info: RecordInfo, values: Any, step: int) -> None:
        """Writes one step of a table record (rows: info.scopes)."""
        self._write(info, encode_table(info, values), step, tensor=table_proto)

    def write_blobs(self, info: RecordInfo, documents: Iterable[Any], step: int) -> None:
        """Writes one step of a blob-sequence record (one JSON blob per document)."""
        blobs = encode_blobs(info, documents)
        self._write(info, np.array(blobs, dtype=object), step)

    def flush(self) -> None:
        """Puts every record written so far on disk (no call when there is none)."""
        if self._unflushed:
            self._file.flush()
            self._unflushed = False

    def close(self) -> None:
        """Flushes and closes the file (writes after it raise; closing again does nothing)."""
        self._file.close()

    def _write(
        self,
        info: RecordInfo,
        array: np.ndarray,
        step: int,
        tensor: Any = tensor_util.make_tensor_proto,
    ) -> None:
        if not os.path.exists(self._path):
            warn_once(
                ("event_file_gone", self._path),
                f"tb_gradscope: the event file '{self._path}' is gone (logdir "
                f"'{self._logdir}' deleted or moved?); records from step {step} on "
                "are lost. Keep the logdir in place while training, or create a new "
                "recorder to start a new event file.",
            )
        tag = tag_for(info.kind, info.name, self._layout(info))
        value = summary_pb2.Summary.Value(tag=tag, tensor=tensor(array))
        if tag not in self._tags_with_metadata:
            value.metadata.CopyFrom(create_summary_metadata(info))
            self._tags_with_metadata.add(tag)
        event = event_pb2.Event(
            wall_time=time.time(),
            step=int(step),
            summary=summary_pb2.Summary(value=[value]),
        )
        self._file.write(event.SerializeToString())
        self._unflushed = True

    def _layout(self, info: RecordInfo) -> int:
        """The tag layout of a table whose rows differ from the first ones
        written under its (kind, name): 0 for the first rows, then 1, 2, ..."""
        if not info.scopes:
            return 0
        seen = self._layouts.setdefault((info.kind.value, info.name), [])
        if info.scopes not in seen:
            seen.append(info.scopes)
        return seen.index(info.scopes)


def _new_path(logdir: str) -> str:
    """`events.out.tfevents.<seconds>.<host>.<pid>.<n>.gradscope`, TensorBoard's
    `EventFileWriter` naming, with `n` counted in this process and skipping
    names already taken (a record file would truncate an existing file)."""
    stamp, host, pid = int(time.time()), socket.gethostname(), os.getpid()
    while True:
        path = os.path.join(
            logdir,
            f"events.out.tfevents.{stamp:010d}.{host}.{pid}.{next(_FILE_NUMBERS)}{FILE_SUFFIX}",
        )
        if not os.path.exists(path):
            return path


def table_proto(array: np.ndarray) -> tensor_pb2.TensorProto:
    """`tensor_util.make_tensor_proto(array)` for a float32 table, the same
    bytes at a fraction of the cost (a recorded step writes one per loss)."""
    if array.dtype != np.float32 or array.size < 2:
        return tensor_util.make_tensor_proto(array)
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=array.tobytes())
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    return proto
