"""Per-path cuts: a cut on one of several paths from a loss into a scope.

SimSiam's symmetric loss reads the encoder twice, through the predictor and
through `tf.stop_gradient`. The encoder still gets the loss's gradient (by the
predictor), so no variable is blocked, yet the code decided that the direct
path carries none: that decision is a blocked edge too, with its source line,
and with the path the gradient still takes (`BlockedEdge.open_path`).

A candidate is an explicit cut (stop_gradient, no gradient function, a custom
gradient returning None, an unknown op: never a comparison or ArgMax) whose
producer the gradient reaches by another path (`reach.gradient_walk`'s
`passed`). It is a per-path cut when, at scope level, the edge it sits on
carries none of the loss's gradient: a stop_gradient inside a layer (the mean
in `tf.nn.moments`) or beside an open tensor on the same scope edge cuts no
scope-graph edge and is not reported. A classic blocked edge whose producer
scope the loss still reaches (the cut branch calls the scope apart) gets its
open path too. Which scope edges carry a loss's gradient is one more linear
pass, run only for losses with candidates or such edges.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Mapping, Sequence

from tb_gradscope.analysis._flatten import FlatGraph
from tb_gradscope.analysis._gradrules import STRUCTURAL_OPS, GradientRules
from tb_gradscope.analysis._scopegraph import LOOP_TYPES, MAX_LOOP_PASSES, ScopeGraph, union
from tb_gradscope.analysis._source import user_source
from tb_gradscope.format.flowgraph import IGNORED, UPDATES, BlockedEdge

_EMPTY: frozenset[str] = frozenset()
_REACHING = (UPDATES, IGNORED)


def with_path_cuts(
    flat: FlatGraph,
    sg: ScopeGraph,
    rules: GradientRules,
    per_loss: Sequence[tuple],
    cells: Mapping[str, Mapping[str, str]],
    loss_ids: Mapping[str, str],
    blocked: Sequence[BlockedEdge],
) -> list[BlockedEdge]:
    """`blocked` with the open path filled in where the producer scope still
    gets the loss's gradient (a one-sided SimSiam: the stop_gradient branch's
    own call of the encoder is cut, the encoder learns by the predictor),
    followed by the per-path cuts, one blocked edge per (cut, producer scope)."""
    loss_nodes = {start: loss_ids[spec.name] for spec, start, *_ in per_loss}
    by_loss = {
        spec.name: (spec, start, gradient, passed)
        for spec, start, _, gradient, _, passed in per_loss
    }
    open_by_loss: dict[str, set[tuple[str, str]]] = {}

    def open_edges(loss: str) -> set[tuple[str, str]]:
        if loss not in open_by_loss:
            _, start, gradient, _ = by_loss[loss]
            open_by_loss[loss] = gradient_edges(flat, sg, rules, gradient, start, loss_ids[loss])
        return open_by_loss[loss]

    result = []
    for edge in blocked:
        path: list[str] = []
        if edge.loss in by_loss and cells[edge.loss].get(edge.producer_scope) in _REACHING:
            path = open_path(open_edges(edge.loss), edge.producer_scope, loss_ids[edge.loss])
        result.append(dataclasses.replace(edge, open_path=tuple(path)) if path else edge)
    for spec, _, _, passed in by_loss.values():
        own = loss_ids[spec.name]
        for cut in passed:
            producer_side, consumer = sg.place(cut.producer, cut.consumer, loss_nodes, own)
            for producer_scope in producer_side:
                if (
                    cells[spec.name].get(producer_scope) not in _REACHING
                    or producer_scope == consumer
                    or (producer_scope, consumer) not in sg.edges
                    or (producer_scope, consumer) in open_edges(spec.name)
                ):
                    continue
                path = open_path(open_edges(spec.name), producer_scope, own)
                if not path:
                    continue
                result.append(
                    BlockedEdge(
                        loss=spec.name,
                        producer=flat.names[cut.producer],
                        consumer=flat.names[cut.consumer],
                        op_name=flat.names[cut.consumer],
                        op_type=flat.types[cut.consumer],
                        cause=cut.cause,
                        producer_scope=producer_scope,
                        consumer_scope=consumer,
                        source=user_source(flat.ops[cut.consumer]),
                        open_path=tuple(path),
                    )
                )
    return result


def gradient_edges(
    flat: FlatGraph,
    sg: ScopeGraph,
    rules: GradientRules,
    reached: bytearray,
    start: int,
    loss_id: str,
) -> set[tuple[str, str]]:
    """The scope-graph edges the loss's gradient crosses: the forward labelling
    of `ScopeGraph`, over the data edges TF's gradient rules let through into
    nodes the gradient reaches (repeated while loop values settle)."""
    readers, label, cone, types = sg.readers, sg.label, sg.cone, flat.types
    upstream: dict[int, frozenset[str]] = {}
    edges: set[tuple[str, str]] = set()
    passes = MAX_LOOP_PASSES + 1 if any(t in LOOP_TYPES for t in set(types)) else 1
    for _ in range(passes):
        changed = False
        for n, op_inputs in enumerate(flat.inputs):
            if not reached[n] or not cone[n] or n in readers or types[n] in STRUCTURAL_OPS:
                continue
            rule = rules.rule(n)
            if rule.cause is not None:
                continue
            carried = [
                src
                for i, (src, trainable) in enumerate(op_inputs)
                if trainable
                and i not in rule.rerouted
                and i not in rule.none_inputs
                and src not in readers
            ]
            scope = label.get(n)
            if scope is not None:
                for src in carried:
                    edges.update((a, scope) for a in upstream.get(src, _EMPTY) if a != scope)
                value = frozenset((scope,))
            else:
                value = union(upstream.get(src, _EMPTY) for src in carried)
            if upstream.get(n, _EMPTY) != value:
                upstream[n] = value
                changed = True
        if not changed:
            break
    into_loss = {readers[start]} if start in readers else upstream.get(start, _EMPTY)
    edges.update((a, loss_id) for a in into_loss)
    return edges


def open_path(edges: set[tuple[str, str]], start: str, target: str) -> list[str]:
    """A shortest path of `edges` from `start` to `target` ([] if none)."""
    successors: dict[str, list[str]] = {}
    for src, dst in sorted(edges):
        successors.setdefault(src, []).append(dst)
    previous: dict[str, str | None] = {start: None}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == target:
            path = [node]
            while previous[path[-1]] is not None:
                path.append(previous[path[-1]])
            return path[::-1]
        for nxt in successors.get(node, ()):
            if nxt not in previous:
                previous[nxt] = node
                queue.append(nxt)
    return []
