"""Gradscope runs written without tensorflow, and damaged one record at a time.

`RunPlan` is a well-formed run as the recorder writes it (grad_stats per loss,
update_stats, a drift pair, a conflict pair, a FlowGraph, events), built from
TensorBoard's protos and written with TensorBoard's pure-Python record framing,
so a test can write hundreds of runs in a second. Each record is one event
(one `Summary.Value`); the full metadata is on a tag's first event only.

Damages (issue 24) change one record: its tensor (dtype, shape, emptied), its
metadata content (attrs), a JSON document (field types), or the file's bytes
(truncation, a flipped byte, a header claiming 2^40 bytes). `Damage.kept` says
which records every reader must still serve.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard.util import tensor_util

from tb_gradscope import format as fmt

PAIR = "target<-online"
DRIFT_COLUMNS = fmt.KIND_SPECS[fmt.Kind.DRIFT].columns + (
    "online_step",
    "gap",
    "tau_reverse",
    "gap_reverse",
    "optimizer_vars",
)


@dataclasses.dataclass
class Record:
    """One event of a run: a record of `kind` at `step` under `tag`."""

    tag: str
    step: int
    info: fmt.RecordInfo
    payload: Any  # np.ndarray (tables) or list of JSON documents (blobs)
    first: bool  # carries the tag's full metadata
    damaged: bool = False
    tensor: Any = None  # a replacement TensorProto (damaged records)
    content: bytes | None = None  # a replacement metadata content

    @property
    def key(self) -> tuple[str, int]:
        return (self.tag, self.step)


def flowgraph_doc(losses: Sequence[str], scopes: Sequence[str]) -> dict[str, Any]:
    cells = {
        loss: {s: fmt.BLOCKED if s.startswith("target") else fmt.UPDATES for s in scopes}
        for loss in losses
    }
    return fmt.FlowGraph(
        losses=[fmt.LossInfo(loss) for loss in losses],
        scopes=list(scopes),
        cells=cells,
        applied=[s for s in scopes if not s.startswith("target")],
        source="tf2",
    ).to_json()


def event_doc(step: int, loss: str, scope: str, index: int = 0) -> dict[str, Any]:
    return fmt.Event(
        type=fmt.VIOLATION,
        name=f"never({loss}, target/*)",
        step=step,
        message=f"loss '{loss}' reaches scope '{scope}' ({index})",
        loss=loss,
        scope=scope,
        evidence={"l2": 0.5 + index},
    ).to_json()


def table_values(
    kind: fmt.Kind, columns: Sequence[str], scopes: Sequence[str], step: int, salt: int
) -> np.ndarray:
    """Deterministic, finite values (grad_vars 2 so every cell has a gradient)."""
    rows = np.arange(len(scopes), dtype=np.float32)[:, None]
    cols = np.arange(len(columns), dtype=np.float32)[None, :]
    values = 1.0 + rows * 0.5 + cols * 0.25 + step * 1e-3 + salt * 0.1
    if kind == fmt.Kind.GRAD_STATS:
        values[:, 0] = 2.0
    return values.astype(np.float32)


@dataclasses.dataclass
class RunPlan:
    """A well-formed run: `steps` recorded steps over `scopes` for `losses`."""

    losses: Sequence[str] = ("td", "aux")
    scopes: Sequence[str] = ("online", "online/l1", "target", "target/l1")
    steps: Sequence[int] = tuple(range(4))
    events_per_step: int = 1
    drift: bool = True
    conflict: bool = True

    def records(self) -> list[Record]:
        out: list[Record] = []
        seen: set[str] = set()

        def add(tag: str, step: int, info: fmt.RecordInfo, payload: Any) -> None:
            out.append(Record(tag, step, info, payload, tag not in seen))
            seen.add(tag)

        tables = [(fmt.Kind.GRAD_STATS, loss, {}) for loss in self.losses]
        tables.append((fmt.Kind.UPDATE_STATS, "", {}))
        if self.drift:
            tables.append(
                (
                    fmt.Kind.DRIFT,
                    PAIR,
                    {"target": "target", "online": "online", "state_scopes": [], "tau": 0.01},
                )
            )
        if self.conflict and len(self.losses) >= 2:
            pair = list(self.losses[:2])
            tables.append((fmt.Kind.CONFLICT, "|".join(pair), {"losses": pair}))
        for step in self.steps:
            for salt, (kind, name, attrs) in enumerate(tables):
                info = fmt.make_info(kind, name, self.scopes, attrs)
                if kind == fmt.Kind.DRIFT:
                    info = dataclasses.replace(info, columns=DRIFT_COLUMNS)
                add(
                    fmt.tag_for(kind, name),
                    step,
                    info,
                    table_values(kind, info.columns, self.scopes, step, salt),
                )
            if step == self.steps[0]:
                info = fmt.make_info(
                    fmt.Kind.FLOWGRAPH, attrs={"rules": [f"never({self.losses[0]}, target/*)"]}
                )
                add(
                    fmt.tag_for(fmt.Kind.FLOWGRAPH),
                    step,
                    info,
                    [flowgraph_doc(self.losses, self.scopes)],
                )
            if self.events_per_step:
                info = fmt.make_info(fmt.Kind.EVENTS, "step")
                docs = [
                    event_doc(step, self.losses[0], "target/l1", i)
                    for i in range(self.events_per_step)
                ]
                add(fmt.tag_for(fmt.Kind.EVENTS, "step"), step, info, docs)
        return out


def to_event(record: Record, wall_time: float) -> event_pb2.Event:
    spec = fmt.KIND_SPECS[record.info.kind]
    if record.tensor is not None:
        tensor = record.tensor
    elif spec.is_table:
        tensor = tensor_util.make_tensor_proto(record.payload)
    else:
        tensor = tensor_util.make_tensor_proto(
            np.array([fmt.encode_json(d) for d in record.payload], dtype=object)
        )
    value = summary_pb2.Summary.Value(tag=record.tag, tensor=tensor)
    if record.first:
        value.metadata.CopyFrom(fmt.create_summary_metadata(record.info))
        if record.content is not None:
            value.metadata.plugin_data.content = record.content
    else:  # as the recorder writes later events: empty metadata
        value.metadata.CopyFrom(summary_pb2.SummaryMetadata())
    return event_pb2.Event(
        step=record.step, wall_time=wall_time, summary=summary_pb2.Summary(value=[value])
    )


def encode(records: Sequence[Record]) -> tuple[bytes, list[tuple[int, int]]]:
    """An event file's bytes and the (offset, length) of each record's frame."""
    chunks = []

    class _Buffer:
        def write(self, data: bytes) -> None:
            chunks.append(data)

    writer = RecordWriter(_Buffer())
    writer.write(event_pb2.Event(wall_time=1.0, file_version="brain.Event:2").SerializeToString())
    for i, record in enumerate(records):
        writer.write(to_event(record, 1000.0 + i).SerializeToString())
    frames, pos = [], len(chunks[0])
    for chunk in chunks[1:]:
        frames.append((pos, len(chunk)))
        pos += len(chunk)
    return b"".join(chunks), frames


def write_run(logdir: str, run: str, records: Sequence[Record], data: bytes | None = None) -> str:
    """Writes one event file for `run` (its bytes `data` if given); returns its path."""
    path = os.path.join(
        logdir, run, f"events.out.tfevents.1000.gradscope.{run.replace(os.sep, '_')}"
    )
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(encode(records)[0] if data is None else data)
    return path


# --- damages -------------------------------------------------------------


@dataclasses.dataclass
class Damage:
    """What was done to a run; `kept` holds the (tag, step) keys every reader
    must still serve, `lost_tags` tags a reader may drop whole."""

    name: str
    records: list[Record]
    data: bytes
    kept: set[tuple[str, int]]


def _table_tensor(array: np.ndarray, shape: Sequence[int] | None = None, dtype: int | None = None):
    proto = tensor_util.make_tensor_proto(array)
    if shape is not None:
        del proto.tensor_shape.dim[:]
        for n in shape:
            proto.tensor_shape.dim.add(size=n)
    if dtype is not None:
        proto.dtype = dtype
    return proto


def _blob_tensor(documents: Sequence[bytes]):
    return tensor_util.make_tensor_proto(np.array(list(documents), dtype=object))


def _others(records: Sequence[Record], target: Record, same_tag_too: bool) -> set[tuple[str, int]]:
    return {r.key for r in records if r is not target and (same_tag_too or r.tag != target.tag)}


# Each semantic damage: (name, applies to record?, mutate(record) -> bool "the
# rest of the tag survives"). A damage TensorBoard's own conversion chokes on
# takes the whole tag (its provider converts a series at once); one that
# gradscope's schema catches loses only the record.
def _emptied(r: Record) -> bool:
    r.tensor = tensor_pb2.TensorProto()  # dtype 0 (DT_INVALID), no shape, no content
    return False


def _shape_off_by_one(r: Record) -> bool:
    rows, cols = r.payload.shape
    r.tensor = _table_tensor(r.payload, shape=(rows + 1, cols))  # content of rows x cols
    return False


def _rows_not_labels(r: Record) -> bool:
    r.tensor = _table_tensor(np.concatenate([r.payload, r.payload[:1]]))  # one row more than labels
    return True


def _int_table(r: Record) -> bool:
    r.tensor = _table_tensor(r.payload.astype(np.int32))
    return True


def _string_table(r: Record) -> bool:
    r.tensor = _blob_tensor([b"1.0"] * max(1, r.payload.size))
    return True


def _doc_field(field: str, value: Any) -> Callable[[Record], bool]:
    def mutate(r: Record) -> bool:
        docs = [dict(d) for d in r.payload]
        docs[0][field] = value
        r.tensor = _blob_tensor([json.dumps(d).encode() for d in docs])
        return True

    mutate.__name__ = f"{field}={value!r}"
    return mutate


def _loss_name_list(r: Record) -> bool:
    doc = dict(r.payload[0])
    doc["losses"] = [dict(doc["losses"][0], name=["td"])] + doc["losses"][1:]
    r.tensor = _blob_tensor([json.dumps(doc).encode()])
    return True


def _cells_not_object(r: Record) -> bool:
    doc = dict(r.payload[0], cells=["updates"])
    r.tensor = _blob_tensor([json.dumps(doc).encode()])
    return True


def _float_blob(r: Record) -> bool:
    r.tensor = _table_tensor(np.ones(len(r.payload), np.float32))  # numbers where strings go
    return True


def _not_json(r: Record) -> bool:
    r.tensor = _blob_tensor([b"\xff{not json"])
    return True


def _attr(name: str, value: Any) -> Callable[[Record], bool]:
    def mutate(r: Record) -> bool:
        content = json.loads(r.info.to_content())
        content["attrs"][name] = value
        r.content = json.dumps(content).encode()
        return True  # the attribute is dropped, the record kept

    mutate.__name__ = f"attrs.{name}={value!r}"
    return mutate


TABLE_DAMAGES: dict[str, Callable[[Record], bool]] = {
    "emptied": _emptied,
    "shape_off_by_one": _shape_off_by_one,
    "rows_not_labels": _rows_not_labels,
    "int_table": _int_table,
    "string_table": _string_table,
}
EVENT_DAMAGES: dict[str, Callable[[Record], bool]] = {
    "step_str": _doc_field("step", "5"),
    "loss_list": _doc_field("loss", ["td"]),
    "evidence_list": _doc_field("evidence", [1, 2]),
    "type_int": _doc_field("type", 3),
    "message_null": _doc_field("message", None),
    "not_json": _not_json,
    "float_blob": _float_blob,
}
FLOWGRAPH_DAMAGES: dict[str, Callable[[Record], bool]] = {
    "loss_name_list": _loss_name_list,
    "cells_list": _cells_not_object,
    "not_json": _not_json,
    "float_blob": _float_blob,
}
ATTR_DAMAGES: dict[fmt.Kind, dict[str, Callable[[Record], bool]]] = {
    fmt.Kind.DRIFT: {
        "state_scopes_int": _attr("state_scopes", 5),
        "target_list": _attr("target", ["target"]),
        "tau_str": _attr("tau", "0.1"),
        "online_scopes_str": _attr("online_scopes", "online"),
    },
    fmt.Kind.CONFLICT: {"losses_int": _attr("losses", 7)},
    fmt.Kind.FLOWGRAPH: {"rules_str": _attr("rules", "never(td, x)")},
}


def damage_record(records: list[Record], index: int, how: str) -> Damage:
    """Applies the semantic damage `how` to records[index]."""
    target = records[index]
    kind = target.info.kind
    table = {**TABLE_DAMAGES} if fmt.KIND_SPECS[kind].is_table else {}
    if kind == fmt.Kind.EVENTS:
        table = EVENT_DAMAGES
    elif kind == fmt.Kind.FLOWGRAPH:
        table = FLOWGRAPH_DAMAGES
    if how.startswith("attrs."):
        table = {f"attrs.{k}": v for k, v in ATTR_DAMAGES.get(kind, {}).items()}
        if not target.first:
            raise ValueError("attrs damage needs a tag's first record")
    mutate = table[how]
    target.damaged = True
    tag_survives = mutate(target)
    kept = _others(records, target, same_tag_too=tag_survives)
    if how.startswith("attrs."):
        kept.add(target.key)
    return Damage(f"{kind.value}:{how}", records, encode(records)[0], kept)


BYTE_DAMAGES = ("truncate", "flip", "huge_length")


def damage_bytes(records: list[Record], index: int, how: str) -> Damage:
    """Damages the frame of records[index] in the file: cut the file inside it,
    flip a byte of its payload, or make its header claim 2^40 bytes. Both
    TensorBoard backends stop reading the file there: records before it stay."""
    data, frames = encode(records)
    offset, length = frames[index]
    raw = bytearray(data)
    if how == "truncate":
        raw = raw[: offset + length // 2]
    elif how == "flip":
        raw[offset + 12 + (length - 16) // 2] ^= 0xFF
    elif how == "huge_length":
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c

        header = struct.pack("<Q", 1 << 40)
        raw[offset : offset + 12] = header + struct.pack("<I", masked_crc32c(header))
    else:
        raise ValueError(how)
    records[index].damaged = True
    return Damage(f"bytes:{how}", records, bytes(raw), {r.key for r in records[:index]})


# --- what a reader serves --------------------------------------------------


def served(get: Callable[..., Any], run: str, records: Sequence[Record]) -> set[tuple[str, int]]:
    """The (tag, step) keys of `records` that the plugin's routes serve with
    their written values. `get(route, **params)` returns the parsed JSON of a
    200 answer, or None.

    Tables are compared through the series route (the first scope, second
    column: a value, not a label), FlowGraphs through the flowgraph route,
    events through the events route (by message)."""
    found: set[tuple[str, int]] = set()
    by_tag: dict[str, list[Record]] = {}
    for r in records:
        by_tag.setdefault(r.tag, []).append(r)
    events = (get("events", run=run) or {}).get("events", [])
    messages = {(e["step"], e["message"]) for e in events}
    graph = get("flowgraph", run=run) or {}
    for group in by_tag.values():
        info = group[0].info
        if fmt.KIND_SPECS[info.kind].is_table and not info.scopes:
            found |= {r.key for r in group}  # a table without rows has no value to serve
        elif fmt.KIND_SPECS[info.kind].is_table:
            col = min(1, len(info.columns) - 1)  # a value column, not grad_vars
            scope, column = info.scopes[0], info.columns[col]
            body = get(
                "series",
                run=run,
                kind=info.kind.value,
                name=info.name,
                scope=scope,
                stat=column,
                points=100_000,
            )
            points = {step: value for step, _, value in (body or {}).get("points", [])}
            for r in group:
                expected = float(np.float32(r.payload[0, col]))
                if (
                    r.step in points
                    and points[r.step] is not None
                    and abs(points[r.step] - expected) <= 1e-6 * abs(expected)
                ):
                    found.add(r.key)
        elif info.kind == fmt.Kind.EVENTS:
            for r in group:
                if all((d["step"], d["message"]) in messages for d in r.payload):
                    found.add(r.key)
        elif info.kind == fmt.Kind.FLOWGRAPH:
            for r in group:
                if graph.get("step") == r.step and graph.get("flowgraph") == r.payload[-1]:
                    found.add(r.key)
    return found
