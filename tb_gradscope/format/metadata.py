"""The on-disk contract: plugin name, record kinds, tags and summary metadata.

Every summary tb_gradscope writes carries `SummaryMetadata` with
`plugin_data.plugin_name == "gradscope"`, the `data_class` TensorBoard needs to
route it (TENSOR or BLOB_SEQUENCE), and a JSON `content` that says which kind of
record it is, which format version wrote it, and how to read its rows. Readers
identify a record by that content, never by parsing the tag.

This module imports neither tensorflow nor anything that does.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from tensorboard.compat.proto import summary_pb2

PLUGIN_NAME = "gradscope"

# Bump when a reader of the previous version would misread new records.
# Adding a column or an optional JSON field is not such a change.
FORMAT_VERSION = 1

TAG_PREFIX = "gradscope"


class Kind(str, enum.Enum):
    """Every kind of record tb_gradscope writes."""

    GRAD_STATS = "grad_stats"  # per loss: one row per scope of gradient stats
    UPDATE_STATS = "update_stats"  # one row per scope: applied update and weight norms
    FLOWGRAPH = "flowgraph"  # the static FlowGraph of a traced step (JSON blob)
    DRIFT = "drift"  # per target/online pair: one row per scope
    CONFLICT = "conflict"  # per pair of losses: cosine per shared scope
    EVENTS = "events"  # violations and anomalies seen at a step (JSON blobs)


@dataclasses.dataclass(frozen=True)
class KindSpec:
    """How a kind is stored: its data class and, for tables, its columns."""

    data_class: int
    columns: tuple[str, ...] = ()

    @property
    def is_table(self) -> bool:
        return self.data_class == summary_pb2.DATA_CLASS_TENSOR


# GRAD_STATS columns a recorder may be told to leave out (each costs passes over
# every gradient): left out, they read NaN, which they never are when recorded.
OPTIONAL_GRAD_COLUMNS = ("max_abs", "zero_frac")


def recorded_stat(row: Mapping[str, float], column: str) -> float | None:
    """A grad_stats row's `column`, or None when the row lacks it or the run
    did not record it (NaN in an OPTIONAL_GRAD_COLUMNS column)."""
    value = row.get(column)
    if value is None or (column in OPTIONAL_GRAD_COLUMNS and math.isnan(value)):
        return None
    return value


def update_measured(row: Mapping[str, float]) -> bool:
    """Whether an update_stats row's `update_norm` was measured. NaN beside a
    finite `weight_norm` means not: a TF1 step written before a train op
    writing the scope ran at it. Both NaN is a measurement (the update made
    the weights NaN)."""
    update, weight = row.get("update_norm"), row.get("weight_norm")
    if update is None or not math.isnan(update):
        return True
    return weight is None or not math.isfinite(weight)


KIND_SPECS: Mapping[Kind, KindSpec] = {
    # grad_vars: how many variables of the scope received a gradient (0 means
    # "no gradient", i.e. tape.gradient returned None for all of them, and the
    # other columns are then meaningless). nonfinite counts NaN/Inf elements;
    # zero_frac is the fraction of exact zeros among elements that have a gradient.
    # max_abs and zero_frac are OPTIONAL_GRAD_COLUMNS: NaN there means "not recorded".
    Kind.GRAD_STATS: KindSpec(
        summary_pb2.DATA_CLASS_TENSOR,
        ("grad_vars", "l2", "max_abs", "nonfinite", "zero_frac"),
    ),
    # update_norm is ||theta_after - theta_before|| across the optimizer step,
    # weight_norm is ||theta_after||.
    Kind.UPDATE_STATS: KindSpec(summary_pb2.DATA_CLASS_TENSOR, ("update_norm", "weight_norm")),
    Kind.FLOWGRAPH: KindSpec(summary_pb2.DATA_CLASS_BLOB_SEQUENCE),
    # drift = distance / online_norm with distance = ||theta_t - theta_o||;
    # target_step = ||theta_t(now) - theta_t(previous recorded step)||;
    # tau is the effective EMA rate estimated at this step (NaN when undefined).
    Kind.DRIFT: KindSpec(
        summary_pb2.DATA_CLASS_TENSOR,
        ("drift", "distance", "online_norm", "target_step", "tau"),
    ),
    Kind.CONFLICT: KindSpec(summary_pb2.DATA_CLASS_TENSOR, ("cosine",)),
    Kind.EVENTS: KindSpec(summary_pb2.DATA_CLASS_BLOB_SEQUENCE),
}

# Columns the DRIFT writers (`record/drift.py`, the TF1 recorder) add after the
# format's required ones (meanings in `record/drift.py`). Readers look columns
# up by name, so records without them still decode.
DRIFT_EXTRA_COLUMNS = (
    "online_step",
    "gap",
    "tau_reverse",
    "gap_reverse",
    "optimizer_vars",
    "target_moved",
)
DRIFT_COLUMNS = KIND_SPECS[Kind.DRIFT].columns + DRIFT_EXTRA_COLUMNS


class FormatError(ValueError):
    """A gradscope record that cannot be read."""


class NewerFormatError(FormatError):
    """A record written by a newer tb-gradscope than this one."""


@dataclasses.dataclass(frozen=True)
class RecordInfo:
    """What a record's metadata content says about it.

    Attributes:
      kind: the record kind.
      version: the format version that wrote it.
      name: the loss name (grad_stats), pair name (drift), "a|b" (conflict),
        or "" for run-wide kinds.
      scopes: row labels of a table kind, in row order.
      columns: column labels of a table kind, in column order.
      attrs: kind-specific extras (e.g. a pair's target and online scopes).
    """

    kind: Kind
    version: int
    name: str = ""
    scopes: tuple[str, ...] = ()
    columns: tuple[str, ...] = ()
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_content(self) -> bytes:
        payload = {
            "version": self.version,
            "kind": self.kind.value,
            "name": self.name,
            "scopes": list(self.scopes),
            "columns": list(self.columns),
            "attrs": dict(self.attrs),
        }
        return json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")


def tag_for(kind: Kind, name: str = "", layout: int = 0) -> str:
    """The tag a record is written under.

    Tags are unique per (kind, name, layout); `layout` counts scope-layout
    changes within a run (variables created after the first recorded step), so a
    tag's rows always mean the same scopes.
    """
    parts = [TAG_PREFIX, Kind(kind).value]
    if name:
        parts.append(name)
    tag = "/".join(parts)
    return f"{tag}~{layout}" if layout else tag


def make_info(
    kind: Kind,
    name: str = "",
    scopes: Sequence[str] = (),
    attrs: Mapping[str, Any] | None = None,
) -> RecordInfo:
    """A RecordInfo for a new record of the current version."""
    kind = Kind(kind)
    return RecordInfo(
        kind=kind,
        version=FORMAT_VERSION,
        name=name,
        scopes=tuple(scopes),
        columns=KIND_SPECS[kind].columns,
        attrs=dict(attrs or {}),
    )


def create_summary_metadata(info: RecordInfo) -> summary_pb2.SummaryMetadata:
    """The SummaryMetadata proto to write with a record."""
    return summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=PLUGIN_NAME, content=info.to_content()
        ),
        data_class=KIND_SPECS[info.kind].data_class,
    )


def parse_plugin_content(content: bytes) -> RecordInfo:
    """Reads a record's metadata content.

    Raises:
      NewerFormatError: the record was written by a newer tb-gradscope.
      FormatError: the content is not a gradscope record this version knows.
    """
    try:
        payload = json.loads(bytes(content).decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise FormatError(f"gradscope metadata is not UTF-8 JSON: {e}") from None
    if not isinstance(payload, dict):
        raise FormatError("gradscope metadata is not a JSON object")
    version = payload.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise FormatError(f"gradscope metadata has no valid version: {version!r}")
    if version > FORMAT_VERSION:
        raise NewerFormatError(
            f"record written by a newer tb-gradscope (format version {version}; "
            f"this tb-gradscope reads up to version {FORMAT_VERSION}); "
            "upgrade tb-gradscope to read it"
        )
    try:
        kind = Kind(payload.get("kind"))
    except ValueError:
        raise FormatError(f"unknown gradscope record kind {payload.get('kind')!r}") from None
    scopes = payload.get("scopes", [])
    columns = payload.get("columns", [])
    attrs = payload.get("attrs", {})
    name = payload.get("name", "")
    if not (
        _is_str_list(scopes)
        and _is_str_list(columns)
        and isinstance(attrs, dict)
        and isinstance(name, str)
    ):
        raise FormatError(f"malformed gradscope metadata for kind {kind.value!r}")
    for what, labels in (("scopes", scopes), ("columns", columns)):
        if len(set(labels)) != len(labels):
            twice = sorted({label for label in labels if labels.count(label) > 1})
            raise FormatError(f"gradscope {kind.value} metadata repeats {what} {twice[:5]}")
    missing = [c for c in KIND_SPECS[kind].columns if c not in columns]
    if KIND_SPECS[kind].is_table and missing:
        raise FormatError(f"gradscope {kind.value} record lacks columns {missing}")
    return RecordInfo(
        kind=kind,
        version=version,
        name=name,
        scopes=tuple(scopes),
        columns=tuple(columns),
        attrs=attrs,
    )


def _is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)
