"""The on-disk contract between the recorder and the readers: kinds, tags, metadata, codecs.

Plugin name, record kinds and their registry (`KIND_SPECS`, `DRIFT_COLUMNS`),
versioned metadata, table and JSON-blob codecs, the FlowGraph and Event
documents and the schema a record is checked against before it is read. Plain
Python, numpy and TensorBoard's protos only: never tensorflow. Imports no other
tb_gradscope package; every package may import it. See docs/FORMAT.md.
"""

from tb_gradscope.format.events import ANOMALY, DROPPED, SKIPPED, VIOLATION, Event
from tb_gradscope.format.flowgraph import (
    BLOCKED,
    FLOW_STATES,
    IGNORED,
    INDEPENDENT,
    NONFINITE,
    STATIC_FLOW_STATES,
    UPDATES,
    VANISHING,
    BlockedEdge,
    FlowGraph,
    GraphEdge,
    GraphNode,
    LossInfo,
    SourceLine,
)
from tb_gradscope.format.metadata import (
    DRIFT_COLUMNS,
    DRIFT_EXTRA_COLUMNS,
    FORMAT_VERSION,
    KIND_SPECS,
    PLUGIN_NAME,
    FormatError,
    Kind,
    NewerFormatError,
    RecordInfo,
    create_summary_metadata,
    make_info,
    parse_plugin_content,
    tag_for,
)
from tb_gradscope.format.records import (
    Table,
    decode_blobs,
    decode_json,
    decode_table,
    encode_blobs,
    encode_json,
    encode_table,
)
from tb_gradscope.format.schema import clean_attrs, read_plugin_content

__all__ = [
    "ANOMALY",
    "BLOCKED",
    "BlockedEdge",
    "DRIFT_COLUMNS",
    "DRIFT_EXTRA_COLUMNS",
    "DROPPED",
    "Event",
    "FLOW_STATES",
    "FORMAT_VERSION",
    "FlowGraph",
    "FormatError",
    "GraphEdge",
    "GraphNode",
    "IGNORED",
    "INDEPENDENT",
    "KIND_SPECS",
    "Kind",
    "LossInfo",
    "NONFINITE",
    "NewerFormatError",
    "PLUGIN_NAME",
    "RecordInfo",
    "SKIPPED",
    "STATIC_FLOW_STATES",
    "SourceLine",
    "Table",
    "UPDATES",
    "VANISHING",
    "VIOLATION",
    "clean_attrs",
    "create_summary_metadata",
    "decode_blobs",
    "decode_json",
    "decode_table",
    "encode_blobs",
    "encode_json",
    "encode_table",
    "make_info",
    "parse_plugin_content",
    "read_plugin_content",
    "tag_for",
]
