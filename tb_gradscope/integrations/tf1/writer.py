"""Writes gradscope records from numpy values with TensorBoard's event writer.

The TF1 integration computes its stats in the user's graph and fetches them with
the user's `Session.run`; writing the fetched tables from Python keeps the
user's graph free of summary ops. Each tag carries its full SummaryMetadata on
its first event in the file (TensorBoard keeps the first metadata it sees).
"""

from __future__ import annotations

import os
import time
from typing import Any, Iterable

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, types_pb2
from tensorboard.summary.writer.event_file_writer import EventFileWriter
from tensorboard.util import tensor_util

from tb_gradscope.format import (
    RecordInfo,
    create_summary_metadata,
    encode_blobs,
    encode_table,
    tag_for,
)
from tb_gradscope.record.warn import warn_once


class RecordWriter:
    """One event file of gradscope records in `logdir`.

    A deleted or moved logdir makes the event writer lose data without an
    error, so every write checks that the file is still there and warns once
    when it is not.
    """

    def __init__(self, logdir: str, flush_secs: float = 30.0):
        self._writer = EventFileWriter(
            logdir, flush_secs=flush_secs, filename_suffix=".gradscope"
        )
        self._logdir = logdir
        self._tags_with_metadata: set[str] = set()

    @property
    def path(self) -> str:
        """The event file being written."""
        return self._writer._file_name

    def write_table(self, info: RecordInfo, values: Any, step: int) -> None:
        """Writes one step of a table record (rows: info.scopes)."""
        self._write(info, encode_table(info, values), step, tensor=table_proto)

    def write_blobs(self, info: RecordInfo, documents: Iterable[Any], step: int) -> None:
        """Writes one step of a blob-sequence record (one JSON blob per document)."""
        blobs = encode_blobs(info, documents)
        self._write(info, np.array(blobs, dtype=object), step)

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()

    def _write(self, info: RecordInfo, array: np.ndarray, step: int,
               tensor: Any = tensor_util.make_tensor_proto) -> None:
        if not os.path.exists(self.path):
            warn_once(
                ("event_file_gone", self.path),
                f"tb_gradscope: the event file '{self.path}' is gone (logdir "
                f"'{self._logdir}' deleted or moved?); records from step {step} on "
                "are lost. Keep the logdir in place while training, or create a new "
                "GraphRecorder to start a new event file.",
            )
        tag = tag_for(info.kind, info.name)
        value = summary_pb2.Summary.Value(
            tag=tag, tensor=tensor(array)
        )
        if tag not in self._tags_with_metadata:
            value.metadata.CopyFrom(create_summary_metadata(info))
            self._tags_with_metadata.add(tag)
        event = event_pb2.Event(
            wall_time=time.time(),
            step=int(step),
            summary=summary_pb2.Summary(value=[value]),
        )
        self._writer.add_event(event)


def table_proto(array: np.ndarray) -> tensor_pb2.TensorProto:
    """`tensor_util.make_tensor_proto(array)` for a float32 table, the same
    bytes at a fraction of the cost (a recorded step writes one per loss)."""
    if array.dtype != np.float32 or array.size < 2:
        return tensor_util.make_tensor_proto(array)
    proto = tensor_pb2.TensorProto(dtype=types_pb2.DT_FLOAT, tensor_content=array.tobytes())
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    return proto
