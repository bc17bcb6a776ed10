"""Writes gradscope records from numpy values into a TensorBoard event file.

The TF1 integration computes its stats in the user's graph and fetches them with
the user's `Session.run`; writing the fetched tables from Python keeps the
user's graph free of summary ops. Each tag carries its full SummaryMetadata on
its first event in the file (TensorBoard keeps the first metadata it sees).

An event file is a TFRecord file of serialized `Event` protos, so
`tf.io.TFRecordWriter` writes it: the same framing and CRCs as TensorBoard's
`EventFileWriter`, computed in C++ (TensorBoard's writer computes its CRCs in
pure Python, ~25 us per record) and without a writer thread. Records reach the
disk at `flush` (the recorder flushes when a recorded step is complete).
"""

from __future__ import annotations

import itertools
import os
import socket
import time
from collections.abc import Iterable
from typing import Any

import numpy as np
import tensorflow as tf
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.util import tensor_util

from tb_gradscope.format import (
    RecordInfo,
    create_summary_metadata,
    encode_blobs,
    encode_table,
    tag_for,
)
from tb_gradscope.record._warn import warn_once

FILE_SUFFIX = ".gradscope"
_FILE_NUMBERS = itertools.count()  # two writers in one second get two files


class RecordWriter:
    """One event file of gradscope records in `logdir` (created if needed).

    A deleted or moved logdir makes the file writer lose data without an
    error, so every write checks that the file is still there and warns once
    when it is not.
    """

    def __init__(self, logdir: str):
        tf.io.gfile.makedirs(logdir)
        self._logdir = logdir
        self._path = _new_path(logdir)
        self._file = tf.io.TFRecordWriter(self._path)
        self._tags_with_metadata: set[str] = set()
        self._unflushed = False
        first = event_pb2.Event(
            wall_time=time.time(),
            file_version="brain.Event:2",
            source_metadata=event_pb2.SourceMetadata(writer="tb_gradscope.integrations.tf1"),
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
                "GraphRecorder to start a new event file.",
            )
        tag = tag_for(info.kind, info.name)
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


def _new_path(logdir: str) -> str:
    """`events.out.tfevents.<seconds>.<host>.<pid>.<n>.gradscope`, TensorBoard's
    `EventFileWriter` naming, with `n` counted in this process and skipping
    names already taken (TFRecordWriter would truncate an existing file)."""
    stamp, host, pid = int(time.time()), socket.gethostname(), os.getpid()
    while True:
        path = os.path.join(
            logdir,
            f"events.out.tfevents.{stamp:010d}.{host}.{pid}.{next(_FILE_NUMBERS)}{FILE_SUFFIX}",
        )
        if not tf.io.gfile.exists(path):
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
