"""A step's FlowGraph from PyTorch's structures: reach, capture, param groups.

Per loss and parameter: the capture (`_capture.Capture`) says whether the
loss depends on it in the forward pass and where each path was cut; the
autograd graph (`_reach`) says whether its gradient reaches it; the
optimizers fed by the loss say whether it is applied. `core.cells` turns that
into cells; each blocked leaf scope gives a blocked edge naming the cut's
cause, op and the user's line.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Mapping, Sequence

from tb_gradscope import scopes as scopes_lib
from tb_gradscope.core import cells as cells_lib
from tb_gradscope.format.flowgraph import (
    BLOCKED,
    CAUSE_CUSTOM_GRADIENT_NONE,
    CAUSE_UNKNOWN,
    IGNORED,
    NODE_LOSS,
    NODE_SCOPE,
    UPDATES,
    BlockedEdge,
    FlowGraph,
    GraphEdge,
    GraphNode,
    LossInfo,
    SourceLine,
)
from tb_gradscope.torch._capture import PathCut
from tb_gradscope.torch._names import NamedParameters

SOURCE = "torch"


@dataclasses.dataclass
class LossFacts:
    """What the step showed of one loss.

    Attributes:
      kind: "loss" or "start_point".
      reach: indices of the parameters its autograd graph reaches.
      none_grads: reached, but their gradient is None (a custom Function).
      custom: names of custom Functions on its graph.
      applied: indices of the parameters an optimizer fed by it steps (None:
        no optimizer known).
      optimizer: the label of the optimizer its gradient feeds ("" unknown).
      captured: (deps, origins) of its tensor from the capture, None if unseen.
      custom_sources: custom Function name -> the user's line that applied it.
      open_origins: the scopes its tensor comes out of by a gradient path.
      path_cuts: (stop-gradient cut, scope the cut value came out of) on its way.
    """

    kind: str
    reach: set[int]
    none_grads: set[int]
    custom: list[str]
    applied: set[int] | None
    optimizer: str = ""
    captured: tuple[dict[int, PathCut | None], frozenset[str]] | None = None
    custom_sources: dict[str, SourceLine | None] = dataclasses.field(default_factory=dict)
    open_origins: frozenset[str] = frozenset()
    path_cuts: frozenset[tuple[PathCut, str]] = frozenset()


def flowgraph(
    names: NamedParameters,
    losses: Mapping[str, LossFacts],
    capture_edges: Mapping[tuple[str, str], int],
    capture_error: Exception | None,
    applied_all: set[int] | None,
    requires_grad: Sequence[bool],
    open_edges: Mapping[tuple[str, str], int] | None = None,
) -> FlowGraph:
    """The FlowGraph of one analysed step; `open_edges` are the scope edges
    a gradient path takes (for per-path cuts)."""
    layout = names.layout
    leaves = list(layout.variable_leaf)
    scope_list = list(layout.scopes)
    cells: dict[str, dict[str, str]] = {}
    blocked: list[BlockedEdge] = []
    warnings: list[str] = []
    loss_edges: dict[tuple[str, str], int] = {}
    for loss, facts in losses.items():
        deps, origins = facts.captured if facts.captured is not None else ({}, frozenset())
        if facts.captured is None:
            warnings.append(
                f"the forward pass of loss '{loss}' was not seen (computed before the step "
                "began?): its cells tell reached from not reached only, never blocked"
            )
        states = []
        for i in range(len(names.params)):
            gradient = i in facts.reach and i not in facts.none_grads
            forward = i in deps or i in facts.reach
            states.append(cells_lib.cell_state(forward, gradient, facts.applied, i))
        cells[loss] = cells_lib.roll_up(states, leaves, scope_list)
        node = f"loss:{loss}"
        for src in origins:
            loss_edges[(src, node)] = loss_edges.get((src, node), 0) + 1
        blocked += _blocked_edges(loss, names, states, cells[loss], deps, facts)
        blocked += _path_cuts(loss, cells[loss], facts, open_edges or {})
    if capture_error is not None:
        warnings.append(
            f"the capture of the step stopped at an error ({type(capture_error).__name__}: "
            f"{capture_error}); cells after it may read independent"
        )
    edges = dict(capture_edges)
    edges.update(loss_edges)
    for edge in blocked:
        edges.setdefault((edge.producer_scope, edge.consumer_scope), 1)
    applied = None
    if applied_all is not None:
        hit = {a for i in applied_all for a in scopes_lib.ancestors(leaves[i])}
        applied = [s for s in scope_list if s in hit]
    return FlowGraph(
        losses=[LossInfo(n, f.kind, "", f.optimizer) for n, f in losses.items()],
        scopes=scope_list,
        cells=cells,
        blocked_edges=blocked,
        nodes=_nodes(edges, losses),
        edges=[
            GraphEdge(
                src,
                dst,
                count,
                tuple(
                    e.loss for e in blocked if (e.producer_scope, e.consumer_scope) == (src, dst)
                ),
            )
            for (src, dst), count in sorted(edges.items())
        ],
        applied=applied,
        warnings=warnings,
        source=SOURCE,
        path_cuts=True,
        trainable=cells_lib.trainability(list(requires_grad), leaves, scope_list),
    )


def _blocked_edges(
    loss: str,
    names: NamedParameters,
    states: Sequence[str],
    row: Mapping[str, str],
    deps: Mapping[int, PathCut | None],
    facts: LossFacts,
) -> list[BlockedEdge]:
    """One edge per (blocked leaf scope, cut): every parameter of the leaf blocked."""
    seen: dict[tuple[str, PathCut], str] = {}
    for i, state in enumerate(states):
        leaf = names.scope_of(i)
        if state != BLOCKED or row.get(leaf) != BLOCKED:
            continue
        seen.setdefault((leaf, _cut_of(i, deps, facts)), names.names[i])
    return [_edge(loss, producer, leaf, cut) for (leaf, cut), producer in seen.items()]


def _path_cuts(
    loss: str,
    row: Mapping[str, str],
    facts: LossFacts,
    open_edges: Mapping[tuple[str, str], int],
) -> list[BlockedEdge]:
    """Per-path cuts: a stop-gradient cut of what a scope put out, where the
    loss's gradient still reaches that scope by another path (the open path,
    from the scope to the loss over edges a gradient path takes)."""
    node = f"loss:{loss}"
    out = []
    for cut, producer in sorted(facts.path_cuts, key=lambda c: (c[1], c[0].op)):
        if row.get(producer) not in (UPDATES, IGNORED):
            continue
        path = _open_path(producer, node, facts.open_origins, open_edges)
        if path:
            out.append(_edge(loss, producer, producer, cut, path))
    return out


def _edge(
    loss: str, producer: str, scope: str, cut: PathCut, open_path: Sequence[str] = ()
) -> BlockedEdge:
    """The blocked edge of `cut` from `scope` (`producer`: the name shown) into
    the loss; with `open_path`, a per-path cut."""
    return BlockedEdge(
        loss=loss,
        producer=producer,
        consumer=cut.op,
        op_name=cut.op,
        op_type=cut.op.split(": ")[0],
        cause=cut.cause,
        producer_scope=scope,
        consumer_scope=f"loss:{loss}",
        source=cut.source,
        open_path=open_path,
    )


def _open_path(
    start: str,
    loss_node: str,
    into_loss: frozenset[str],
    open_edges: Mapping[tuple[str, str], int],
) -> tuple[str, ...]:
    """The shortest scope path from `start` to the loss over gradient-carrying edges."""
    nxt: dict[str, list[str]] = {}
    for src, dst in open_edges:
        nxt.setdefault(src, []).append(dst)
    previous: dict[str, str | None] = {start: None}
    queue = collections.deque([start])
    while queue:
        here = queue.popleft()
        if here in into_loss:
            path = [loss_node, here]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])
            return tuple(reversed(path))
        for there in sorted(nxt.get(here, ())):
            if there not in previous:
                previous[there] = here
                queue.append(there)
    return ()


def _cut_of(i: int, deps: Mapping[int, PathCut | None], facts: LossFacts) -> PathCut:
    if i in facts.none_grads:
        op = facts.custom[0] if facts.custom else "autograd.Function"
        return PathCut(CAUSE_CUSTOM_GRADIENT_NONE, op, facts.custom_sources.get(op))
    cut = deps.get(i)
    return cut if cut is not None else PathCut(CAUSE_UNKNOWN, "unknown", None)


def _nodes(
    edges: Mapping[tuple[str, str], int], losses: Mapping[str, LossFacts]
) -> list[GraphNode]:
    ids = sorted({n for edge in edges for n in edge if not n.startswith("loss:")})
    return [GraphNode(s, NODE_SCOPE, s) for s in ids] + [
        GraphNode(f"loss:{n}", NODE_LOSS, n) for n in losses
    ]
