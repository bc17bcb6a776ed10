"""A cheap, stable fingerprint of a FlowGraph, so the recorder rewrites it only on change.

Two FlowGraphs with equal content (dataclass equality) have equal
fingerprints; the digest is over canonical JSON, so it is also stable across
processes and can be stored next to the record.
"""

from __future__ import annotations

import hashlib
import json

from tb_gradscope.format.flowgraph import FlowGraph


def fingerprint(flowgraph: FlowGraph) -> str:
    """Hex SHA-256 of the FlowGraph's canonical JSON document."""
    doc = json.dumps(flowgraph.to_json(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(doc.encode("utf-8")).hexdigest()
