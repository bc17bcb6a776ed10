"""The scope-level dataflow graph: scopes, inputs and losses, small enough to draw.

An op that reads a model variable belongs to that variable's scope; every
other op is glue and passes on the set of scope-graph nodes its inputs came
from. An edge A -> B counts the tensors arriving at an op of B (or at a loss)
whose nearest upstream nodes include A. `downstream` is the mirror image,
used to place a blocked edge's consumer side (`place`). Both are passes in node order;
when the graph has loops, the forward pass repeats until values carried
around back edges settle (at most `MAX_LOOP_PASSES` times, enough for loops
nested that deep).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from tb_gradscope.analysis._flatten import BRANCH, LINK, LOOP_VAR, FlatGraph

# Ops that pass a variable on rather than use it: they join its scope's readers.
_READS = frozenset({"ReadVariableOp", "Identity", LINK, LOOP_VAR, BRANCH})
_EMPTY: frozenset[str] = frozenset()
LOOP_TYPES = frozenset({LOOP_VAR, "NextIteration", "RefNextIteration"})
MAX_LOOP_PASSES = 4


class ScopeGraph:
    """Labels the nodes of the losses' forward cone with scope-graph node ids.

    Args:
      flat: the flattened graph.
      cone: flags of nodes in the union of the losses' forward cones.
      variable_scope: model variable node -> leaf scope.
      inputs: input placeholder node -> scope-graph id (`input:<name>`).
    """

    def __init__(
        self,
        flat: FlatGraph,
        cone: bytearray,
        variable_scope: Mapping[int, str],
        inputs: Mapping[int, str],
    ):
        self.flat = flat
        self.cone = cone
        self.readers = dict(variable_scope)
        self.label: dict[int, str] = {}
        self.upstream: list[frozenset[str]] = [_EMPTY] * len(flat)
        self.edges: Counter[tuple[str, str]] = Counter()
        self._downstream: list[frozenset[str]] | None = None
        changed = self._forward(inputs, count=False)
        if any(t in LOOP_TYPES for t in set(flat.types)):
            for _ in range(MAX_LOOP_PASSES):
                if not changed:
                    break
                changed = self._forward(inputs, count=False)
        self._forward(inputs, count=True)

    def _forward(self, inputs: Mapping[int, str], count: bool) -> bool:
        """One pass in node order; True if any node's upstream set changed."""
        flat, cone, readers, label = self.flat, self.cone, self.readers, self.label
        upstream, edges = self.upstream, self.edges
        changed = False
        for n, op_inputs in enumerate(flat.inputs):
            if not cone[n]:
                continue
            if n in inputs:
                upstream[n] = frozenset((inputs[n],))
                continue
            scope = None
            for src, _ in op_inputs:
                scope = readers.get(src)
                if scope is not None:
                    break
            if scope is not None and flat.types[n] in _READS:
                readers[n] = scope
                continue
            if scope is not None:
                label[n] = scope
                for src, _ in op_inputs if count else ():
                    if src not in readers:
                        for a in upstream[src]:
                            if a != scope:
                                edges[(a, scope)] += 1
                upstream[n] = frozenset((scope,))
                continue
            merged = union(upstream[src] for src, _ in op_inputs)
            if merged != upstream[n]:
                upstream[n] = merged
                changed = True
        return changed

    def add_loss(self, node: int, loss_id: str) -> None:
        """Adds edges from the nodes upstream of a loss tensor to its loss node."""
        for a in self.sources(node):
            self.edges[(a, loss_id)] += 1

    def sources(self, node: int) -> frozenset[str]:
        if node in self.readers:
            return frozenset((self.readers[node],))
        return self.upstream[node]

    def downstream(self, node: int, loss_nodes: Mapping[int, str]) -> frozenset[str]:
        """Scope-graph nodes the output of `node` next arrives at."""
        if self._downstream is None:
            self._downstream = self._backward(loss_nodes)
        return self._downstream[node]

    def place(
        self, producer: int, consumer: int, loss_nodes: Mapping[int, str], own: str
    ) -> tuple[list[str], str]:
        """(the scope-graph nodes feeding a cut edge `producer -> consumer`, the
        node the cut value next arrives at) for the loss whose node is `own`.

        A cut inside its producer's scope is placed where the value leaves it;
        a cut inside a scope that reads it is placed at that scope."""
        producer_side = sorted(self.sources(producer), key=prefer_scope)
        down = self.downstream(consumer, loss_nodes)
        if down <= set(producer_side):  # the cut sits inside the producer's scope
            down = (
                frozenset().union(
                    *(self.downstream(c, loss_nodes) for c in self.flat.consumers()[consumer])
                )
                - set(producer_side)
                or down
            )
        consumer_side = [own] if own in down else sorted(down, key=prefer_scope)
        label = self.label.get(consumer)
        if label is not None and label not in producer_side:
            consumer_side = [label]
        elif not consumer_side:
            consumer_side = producer_side
        return producer_side, consumer_side[0] if consumer_side else ""

    def _backward(self, loss_nodes: Mapping[int, str]) -> list[frozenset[str]]:
        flat, cone, label = self.flat, self.cone, self.label
        down: list[set[str]] = [set() for _ in range(len(flat))]
        for n in range(len(flat) - 1, -1, -1):
            if not cone[n]:
                continue
            if n in loss_nodes:
                down[n].add(loss_nodes[n])
            mine = frozenset((label[n],)) if n in label else frozenset(down[n])
            if n in label and n in loss_nodes:
                mine = mine | {loss_nodes[n]}
            down[n] = mine
            for src, _ in flat.inputs[n]:
                if cone[src] and isinstance(down[src], set):
                    down[src].update(mine)
        return [d if isinstance(d, frozenset) else frozenset(d) for d in down]


def prefer_scope(node_id: str) -> tuple[int, str]:
    """Sort key: scopes before `input:` and `loss:` nodes."""
    return (node_id.startswith(("input:", "loss:")), node_id)


def union(sets) -> frozenset[str]:
    """The union of `sets`, sharing the object when only one is non-empty.

    Several distinct sets are merged into one mutable set, frozen once: an op
    fed by k scopes (an add_n over k variables) costs O(total size), not the
    O(k^2) of growing a frozenset one union at a time.
    """
    result = _EMPTY
    grown: set[str] | None = None
    for s in sets:
        if not s or s is result:
            continue
        if not result:
            result = s
        elif grown is None:
            grown = set(result)
            grown.update(s)
        else:
            grown.update(s)
    return result if grown is None else frozenset(grown)
