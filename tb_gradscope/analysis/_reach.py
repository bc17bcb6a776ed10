"""Per-loss reachability over a FlatGraph: forward dependence, gradient, cuts.

Three iterative walks, each linear in nodes + edges:
- `variable_dependent`: which nodes' values depend on some model variable
  (forward from the variables), shared by all losses;
- `forward_cone`: which nodes the loss's value depends on (backward from it);
- `gradient_walk`: which nodes the loss's gradient reaches under TF's rules,
  and the cut edges met on the way whose producer depends on a variable.
An edge cut only because its tensor is an integer is traced back through the
integer region to the op that left the float world (ArgMax, Cast, ...), so
the blocked edge names the op the user wrote. A cut whose producer the
gradient still reaches by another path blocks no variable: it is returned
apart (`passed`), a candidate per-path cut (`analysis.pathcuts`) when the
user asked for it (not a comparison or ArgMax).
Cuts the user did not ask for (a comparison or ArgMax: non-differentiable or
integer) are reported only when they hide a variable the gradient reaches by
no other path, so the `tf.where` inside a Huber loss is not a blocked edge.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from tb_gradscope.analysis._flatten import FlatGraph
from tb_gradscope.analysis._gradrules import STRUCTURAL_OPS, GradientRules
from tb_gradscope.format.flowgraph import (
    CAUSE_CUSTOM_GRADIENT_NONE,
    CAUSE_INTEGER,
    CAUSE_NON_DIFFERENTIABLE,
)

# Causes that are a property of the math rather than a decision in the code.
_IMPLICIT = frozenset({CAUSE_NON_DIFFERENTIABLE, CAUSE_INTEGER})


@dataclasses.dataclass(frozen=True)
class Cut:
    """A producer -> consumer edge the gradient cannot cross (consumer cuts)."""

    producer: int
    consumer: int
    cause: str


def variable_dependent(flat: FlatGraph, variables: Iterable[int]) -> bytearray:
    """Flags nodes whose output value depends on one of `variables`."""
    consumers = flat.consumers()
    types = flat.types
    dep = bytearray(len(flat))
    stack = list(variables)
    for n in stack:
        dep[n] = 1
    while stack:
        n = stack.pop()
        if types[n] in STRUCTURAL_OPS:
            continue
        for c in consumers[n]:
            if not dep[c]:
                dep[c] = 1
                stack.append(c)
    return dep


def forward_cone(flat: FlatGraph, start: int) -> bytearray:
    """Flags nodes the value at `start` depends on (data edges only)."""
    inputs = flat.inputs
    types = flat.types
    seen = bytearray(len(flat))
    seen[start] = 1
    stack = [start]
    while stack:
        n = stack.pop()
        if types[n] in STRUCTURAL_OPS:
            continue
        for src, _ in inputs[n]:
            if not seen[src]:
                seen[src] = 1
                stack.append(src)
    return seen


def gradient_walk(
    flat: FlatGraph,
    rules: GradientRules,
    start: int,
    var_dep: bytearray,
    variables: Iterable[int] = (),
) -> tuple[bytearray, list[Cut], list[Cut]]:
    """(flags of the nodes a gradient started at `start` reaches, the cuts met
    that hide their producer from it, the explicit cuts met whose producer it
    still reaches by another path)."""
    inputs = flat.inputs
    types = flat.types
    reached = bytearray(len(flat))
    reached[start] = 1
    stack = [start]
    cuts: dict[tuple[int, int], str] = {}
    integer_edges: list[tuple[int, int]] = []
    while stack:
        n = stack.pop()
        if types[n] in STRUCTURAL_OPS:
            continue
        rule = rules.rule(n)
        if rule.cause is not None:
            for src, _ in inputs[n]:
                if var_dep[src]:
                    cuts.setdefault((src, n), rule.cause)
            continue
        for i, (src, trainable) in enumerate(inputs[n]):
            if i in rule.rerouted:
                continue
            if i in rule.none_inputs:
                if var_dep[src]:
                    cuts.setdefault((src, n), CAUSE_CUSTOM_GRADIENT_NONE)
            elif not trainable:
                if var_dep[src]:
                    integer_edges.append((src, n))
            elif not reached[src]:
                reached[src] = 1
                stack.append(src)
    for producer, consumer, cause in _integer_cuts(flat, rules, integer_edges, var_dep):
        cuts.setdefault((producer, consumer), cause)
    hidden = (
        _hidden(flat, reached, variables)
        if any(c in _IMPLICIT for c in cuts.values())
        else bytearray(len(flat))
    )
    ordered = sorted(
        (
            kv
            for kv in cuts.items()
            if not reached[kv[0][0]] and (kv[1] not in _IMPLICIT or hidden[kv[0][0]])
        ),
        key=lambda kv: (kv[0][1], kv[0][0]),
    )
    passed = sorted(
        (kv for kv in cuts.items() if reached[kv[0][0]] and kv[1] not in _IMPLICIT),
        key=lambda kv: (kv[0][1], kv[0][0]),
    )
    return (
        reached,
        [Cut(p, c, cause) for (p, c), cause in ordered],
        [Cut(p, c, cause) for (p, c), cause in passed],
    )


def _hidden(flat: FlatGraph, reached: bytearray, variables: Iterable[int]) -> bytearray:
    """Nodes fed by a variable the gradient misses, along nodes it misses too."""
    consumers = flat.consumers()
    hidden = bytearray(len(flat))
    stack = [v for v in variables if not reached[v]]
    for n in stack:
        hidden[n] = 1
    while stack:
        n = stack.pop()
        if flat.types[n] in STRUCTURAL_OPS:
            continue
        for c in consumers[n]:
            if not hidden[c] and not reached[c]:
                hidden[c] = 1
                stack.append(c)
    return hidden


def _integer_cuts(flat, rules, edges, var_dep):
    """Walks back from integer edges to the ops that turn floats into integers."""
    inputs = flat.inputs
    seen: set[int] = set()
    stack = [src for src, _ in edges]
    while stack:
        n = stack.pop()
        if n in seen or flat.types[n] in STRUCTURAL_OPS:
            continue
        seen.add(n)
        rule = rules.rule(n)
        for src, trainable in inputs[n]:
            if not var_dep[src]:
                continue
            if trainable:
                yield src, n, rule.cause or CAUSE_INTEGER
            else:
                stack.append(src)
