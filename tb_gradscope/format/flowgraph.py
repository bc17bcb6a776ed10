"""The FlowGraph: what static analysis knows about a traced training step.

Plain data, shared by the writer (`analysis/` builds it, `record/` writes it as
a FLOWGRAPH blob) and the readers (plugin, CLI). `to_json`/`from_json` are the
only serialisation; docs/FORMAT.md describes the document.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tb_gradscope.format import schema
from tb_gradscope.format.metadata import FormatError

# Flow states of a (loss, scope) cell. The first four are static (known at
# trace time); VANISHING and NONFINITE are numeric, seen at a recorded step.
UPDATES = "updates"
IGNORED = "ignored"
BLOCKED = "blocked"
INDEPENDENT = "independent"
VANISHING = "vanishing"
NONFINITE = "nonfinite"
STATIC_FLOW_STATES = (UPDATES, IGNORED, BLOCKED, INDEPENDENT)
FLOW_STATES = STATIC_FLOW_STATES + (VANISHING, NONFINITE)

# Why a gradient path is cut at a blocked edge.
CAUSE_STOP_GRADIENT = "stop_gradient"  # StopGradient / PreventGradient
CAUSE_NON_DIFFERENTIABLE = "non_differentiable"  # registered as such (ArgMax, ...)
CAUSE_NO_GRADIENT = "no_gradient"  # no gradient function (PyFunc, ...)
CAUSE_INTEGER = "integer"  # the path only crosses integer or bool tensors
CAUSE_CUSTOM_GRADIENT_NONE = "custom_gradient_none"  # a custom gradient returns None
CAUSE_UNKNOWN = "unknown_gradient"  # an op the analysis does not know
CAUSE_TAPE_BOUNDARY = "tape_boundary"  # read only before the GradientTape opened (or not watched)
CAUSES = (
    CAUSE_STOP_GRADIENT,
    CAUSE_NON_DIFFERENTIABLE,
    CAUSE_NO_GRADIENT,
    CAUSE_INTEGER,
    CAUSE_CUSTOM_GRADIENT_NONE,
    CAUSE_UNKNOWN,
    CAUSE_TAPE_BOUNDARY,
)

# Whether a scope's variables are trainable (TF2 `Variable.trainable`, TF1
# membership in the graph's TRAINABLE_VARIABLES collection): all, none, or some.
TRAINABLE = "trainable"
NOT_TRAINABLE = "not_trainable"
MIXED = "mixed"
TRAINABILITY = (TRAINABLE, NOT_TRAINABLE, MIXED)

# Node kinds of the scope-level dataflow graph.
NODE_SCOPE = "scope"
NODE_INPUT = "input"
NODE_LOSS = "loss"


@dataclasses.dataclass(frozen=True)
class SourceLine:
    """Where in the user's code an op was created (path relative to the cwd)."""

    file: str
    line: int
    function: str = ""


@dataclasses.dataclass(frozen=True)
class BlockedEdge:
    """A producer -> consumer edge where a loss's gradient path is cut.

    `op_name`/`op_type` name the cutting op (the consumer for StopGradient, the
    op without a gradient otherwise); `producer_scope`/`consumer_scope` are the
    scope-graph nodes on either side. `open_path` is empty when the cut blocks
    the loss's every path from `producer_scope`; a per-path cut (one of several
    paths, e.g. SimSiam's stop_gradient branch beside its predictor branch)
    lists the scope-graph nodes of a path the loss's gradient still takes, from
    `producer_scope` to `loss:<name>`.
    """

    loss: str
    producer: str
    consumer: str
    op_name: str
    op_type: str
    cause: str
    producer_scope: str
    consumer_scope: str
    source: SourceLine | None = None
    open_path: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class LossInfo:
    """A named objective, or a gradient start point (tensor + output gradients)."""

    name: str
    kind: str = "loss"  # "loss" or "start_point"
    tensor: str = ""  # the graph tensor the gradient starts from
    # The optimizer step this loss's gradient feeds ("opt0", "opt1", ...): losses
    # with the same label share one (a summed loss); "" when not known.
    optimizer: str = ""


@dataclasses.dataclass(frozen=True)
class GraphNode:
    id: str
    kind: str  # NODE_SCOPE, NODE_INPUT or NODE_LOSS
    label: str


@dataclasses.dataclass(frozen=True)
class GraphEdge:
    """Tensors flowing from one scope-graph node to another in the forward pass."""

    src: str
    dst: str
    tensors: int
    blocked_for: tuple[str, ...] = ()  # losses whose gradient is cut on this edge


@dataclasses.dataclass
class FlowGraph:
    """Per loss: flow state of every scope, blocked edges, and the scope graph.

    `cells[loss][scope]` is one of STATIC_FLOW_STATES for every scope of the
    tree (leaves and roll-ups). `applied` lists the scopes whose variables the
    traced step writes with an optimizer (None when the step was traced without
    its optimizer, so "applied" is unknown until updates are recorded).
    `trainable[scope]` is one of TRAINABILITY for every scope holding a
    variable (None: not known, a log written before the field existed).
    `path_cuts` says the analysis looked for per-path cuts (blocked edges with
    an `open_path`); False for logs written before it did.
    """

    losses: list[LossInfo]
    scopes: list[str]
    cells: dict[str, dict[str, str]]
    blocked_edges: list[BlockedEdge] = dataclasses.field(default_factory=list)
    nodes: list[GraphNode] = dataclasses.field(default_factory=list)
    edges: list[GraphEdge] = dataclasses.field(default_factory=list)
    applied: list[str] | None = None
    warnings: list[str] = dataclasses.field(default_factory=list)
    source: str = ""  # "tf2", "tf1", "keras" or "torch": what was traced
    trainable: dict[str, str] | None = None
    path_cuts: bool = False

    def state(self, loss: str, scope: str) -> str:
        return self.cells[loss][scope]

    def trainability(self, scope: str) -> str | None:
        """TRAINABLE, NOT_TRAINABLE or MIXED for `scope`; None when not known."""
        return None if self.trainable is None else self.trainable.get(scope)

    def to_json(self) -> dict[str, Any]:
        """The document as JSON holds it (lists, not tuples), so `from_json`
        reads back what it was given."""
        doc = dataclasses.asdict(self)
        for edge in doc["edges"]:
            edge["blocked_for"] = list(edge["blocked_for"])
        for edge in doc["blocked_edges"]:
            edge["open_path"] = list(edge["open_path"])
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> FlowGraph:
        """Reads a FlowGraph document, checking every field's type.

        Raises:
          FormatError: a field is missing or of the wrong type, or a cell
            holds an unknown flow state; the message names the field.
        """
        check_document(doc)
        graph = cls(
            losses=[LossInfo(**_known(entry, LossInfo)) for entry in doc["losses"]],
            scopes=list(doc["scopes"]),
            cells={loss: dict(row) for loss, row in doc["cells"].items()},
            blocked_edges=[_blocked_edge(e) for e in doc.get("blocked_edges", [])],
            nodes=[GraphNode(**_known(n, GraphNode)) for n in doc.get("nodes", [])],
            edges=[
                GraphEdge(
                    **{**_known(e, GraphEdge), "blocked_for": tuple(e.get("blocked_for", ()))}
                )
                for e in doc.get("edges", [])
            ],
            applied=doc.get("applied"),
            warnings=list(doc.get("warnings", [])),
            source=doc.get("source", ""),
            trainable=dict(doc["trainable"]) if doc.get("trainable") is not None else None,
            path_cuts=doc.get("path_cuts", False),
        )
        for loss, row in graph.cells.items():
            bad = sorted({st for st in row.values() if st not in FLOW_STATES})
            if bad:
                raise FormatError(f"FlowGraph loss '{loss}' has unknown flow states {bad}")
        bad = sorted({t for t in (graph.trainable or {}).values() if t not in TRAINABILITY})
        if bad:
            raise FormatError(
                f"FlowGraph 'trainable' holds unknown values {bad}; expected one of {list(TRAINABILITY)}"
            )
        return graph


_TEXT = (schema.is_str, "a string")
_TEXTS = (schema.is_str_list, "a list of strings")
_LIST = (lambda v: isinstance(v, list), "a list")
_DOCUMENT = {
    "losses": _LIST,
    "scopes": _TEXTS,
    "cells": (
        lambda v: (
            schema.is_object(v)
            and all(
                schema.is_object(row) and all(isinstance(st, str) for st in row.values())
                for row in v.values()
            )
        ),
        "an object of {scope: flow state} objects",
    ),
    "blocked_edges": _LIST,
    "nodes": _LIST,
    "edges": _LIST,
    "applied": (schema.optional(schema.is_str_list), "null or a list of scope names"),
    "warnings": _TEXTS,
    "source": _TEXT,
    "trainable": (
        lambda v: (
            v is None or (schema.is_object(v) and all(isinstance(t, str) for t in v.values()))
        ),
        "null or an object of {scope: trainability} strings",
    ),
    "path_cuts": (lambda v: isinstance(v, bool), "true or false"),
}
_LOSS = {"name": _TEXT, "kind": _TEXT, "tensor": _TEXT, "optimizer": _TEXT}
_SOURCE = {"file": _TEXT, "line": (schema.is_int, "an integer"), "function": _TEXT}
_EDGE_FIELDS = (
    "loss",
    "producer",
    "consumer",
    "op_name",
    "op_type",
    "cause",
    "producer_scope",
    "consumer_scope",
)
_BLOCKED = {
    **{name: _TEXT for name in _EDGE_FIELDS},
    "source": (lambda v: v is None or schema.is_object(v), "null or an object"),
    "open_path": _TEXTS,
}
_NODE = {"id": _TEXT, "kind": _TEXT, "label": _TEXT}
_GRAPH_EDGE = {
    "src": _TEXT,
    "dst": _TEXT,
    "tensors": (schema.is_int, "an integer"),
    "blocked_for": _TEXTS,
}


def check_document(doc: Any) -> None:
    """Raises FormatError unless `doc` is a FlowGraph document of the right types."""
    schema.require(doc, "FlowGraph document", _DOCUMENT, ("losses", "scopes", "cells"))
    for i, loss in enumerate(doc["losses"]):
        schema.require(loss, f"FlowGraph losses[{i}]", _LOSS, ("name",))
    for i, edge in enumerate(doc.get("blocked_edges", [])):
        schema.require(edge, f"FlowGraph blocked_edges[{i}]", _BLOCKED, _EDGE_FIELDS)
        if edge.get("source") is not None:
            schema.require(
                edge["source"], f"FlowGraph blocked_edges[{i}].source", _SOURCE, ("file", "line")
            )
    for i, node in enumerate(doc.get("nodes", [])):
        schema.require(node, f"FlowGraph nodes[{i}]", _NODE, ("id", "kind", "label"))
    for i, edge in enumerate(doc.get("edges", [])):
        schema.require(edge, f"FlowGraph edges[{i}]", _GRAPH_EDGE, ("src", "dst", "tensors"))


def _known(doc: Mapping[str, Any], cls: type) -> dict[str, Any]:
    """The fields of `doc` that dataclass `cls` has (newer optional ones ignored)."""
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in doc.items() if k in names}


def _blocked_edge(doc: Mapping[str, Any]) -> BlockedEdge:
    source = doc.get("source")
    fields = {k: v for k, v in _known(doc, BlockedEdge).items() if k not in ("source", "open_path")}
    return BlockedEdge(
        **fields,
        source=SourceLine(**_known(source, SourceLine)) if source else None,
        open_path=tuple(doc.get("open_path", ())),
    )
