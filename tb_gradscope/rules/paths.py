"""The un-cut path a loss's gradient takes into a scope, from the FlowGraph's scope graph.

When `never(actor, critic_head)` breaks, the fix is a `tf.stop_gradient` on
the edge where the value leaves `critic_head` on its way to the actor loss.
The scope graph's edges point forward (scope -> ... -> `loss:<name>`), so the
path is a shortest forward path from a node of the scope's subtree to the loss
node, preferring edges not already marked blocked for that loss; the missing
cut is its first edge leaving the subtree. `path_avoiding` finds the paths a
`blocked(..., except_via=...)` rule constrains: those through no excepted scope.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.format.flowgraph import NODE_LOSS, NODE_SCOPE
from tb_gradscope.rules.model import scope_matches


def loss_node_id(flowgraph: fmt.FlowGraph, loss: str) -> str | None:
    """The scope-graph node of a loss (`loss:<name>` by convention)."""
    for node in flowgraph.nodes:
        if node.kind == NODE_LOSS and (node.label == loss or node.id == f"loss:{loss}"):
            return node.id
    return None


def gradient_path(
    flowgraph: fmt.FlowGraph, loss: str, scope: str
) -> tuple[list[str], tuple[str, str] | None]:
    """([node, ..., loss node], (src, dst) of the missing cut), or ([], None)
    when the scope graph holds no such path."""
    target = loss_node_id(flowgraph, loss)
    if target is None:
        return [], None
    inside = {
        n.id
        for n in flowgraph.nodes
        if n.kind == NODE_SCOPE and (n.id == scope or n.id.startswith(scope + "/"))
    }
    if not inside:
        return [], None
    for allow_blocked in (False, True):
        path = _shortest(flowgraph, inside, target, loss, allow_blocked)
        if path:
            return path, _first_exit(path, inside)
    return [], None


def _shortest(
    flowgraph: fmt.FlowGraph, starts: set[str], target: str, loss: str, allow_blocked: bool
) -> list[str]:
    successors: dict[str, list[str]] = {}
    for edge in flowgraph.edges:
        if allow_blocked or loss not in edge.blocked_for:
            successors.setdefault(edge.src, []).append(edge.dst)
    previous: dict[str, str | None] = {s: None for s in sorted(starts)}
    queue = deque(sorted(starts))
    while queue:
        node = queue.popleft()
        if node == target:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])
            return _trim(path[::-1], starts)
        for nxt in successors.get(node, ()):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return []


def _trim(path: list[str], inside: set[str]) -> list[str]:
    """Starts the path at its last node inside the scope's subtree."""
    last = max(i for i, n in enumerate(path) if n in inside)
    return path[last:]


def _first_exit(path: list[str], inside: set[str]) -> tuple[str, str] | None:
    for src, dst in zip(path, path[1:]):
        if src in inside and dst not in inside:
            return src, dst
    return None


def path_avoiding(
    flowgraph: fmt.FlowGraph, loss: str, scope: str, avoid: Sequence[str], open_only: bool = True
) -> tuple[list[str], tuple[str, str] | None]:
    """([node, ..., loss node], its first edge leaving `scope`) for a shortest
    scope-graph path from `scope`'s subtree to the loss through no scope
    matching a pattern of `avoid` (nor below one), on edges not cut for the
    loss (`open_only`) or on every edge; ([], None) when there is none."""
    target = loss_node_id(flowgraph, loss)
    if target is None:
        return [], None

    def avoided(node: str) -> bool:
        return any(scope_matches(a, p) for a in scopes_lib.ancestors(node) for p in avoid)

    scope_nodes = {n.id for n in flowgraph.nodes if n.kind == NODE_SCOPE}
    inside = {
        n for n in scope_nodes if (n == scope or n.startswith(scope + "/")) and not avoided(n)
    }
    blocked = {n for n in scope_nodes if avoided(n)}
    successors: dict[str, list[str]] = {}
    for edge in flowgraph.edges:
        if edge.dst not in blocked and (not open_only or loss not in edge.blocked_for):
            successors.setdefault(edge.src, []).append(edge.dst)
    previous: dict[str, str | None] = {s: None for s in sorted(inside)}
    queue = deque(sorted(inside))
    while queue:
        node = queue.popleft()
        if node == target:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])
            path = _trim(path[::-1], inside)
            return path, _first_exit(path, inside)
        for nxt in successors.get(node, ()):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return [], None
