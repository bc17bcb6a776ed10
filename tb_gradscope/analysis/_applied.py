"""Which model variables the traced step writes from a gradient (the optimizer).

A write is an assign or resource-apply op on a variable handle. Apply ops
(`ResourceApplyAdam`, TF1 `ApplyGradientDescent`, ...) are optimizer updates
by construction. Assign ops count only when their value depends on a gradient
op: directly, or through the optimizer's own state (Keras 3 Adam writes the
slot `m` from the gradient, then reads `m` to update the weight). State
written from a gradient passes the dependence on through its reads; model
variables never do, so `target.assign(online)` after the optimizer step stays
a copy, not an update.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tb_gradscope.analysis._flatten import SYNTHETIC, FlatGraph

ASSIGN_OPS = frozenset(
    {
        "AssignVariableOp",
        "AssignSubVariableOp",
        "AssignAddVariableOp",
        "Assign",
        "AssignSub",
        "AssignAdd",
    }
)
APPLY_PREFIXES = ("ResourceApply", "ResourceSparseApply", "Apply", "SparseApply")
# Op names TF gives gradient ops: tf.gradients -> "gradients/", "gradients_1/";
# GradientTape in a tf.function -> "gradient_tape/".
GRADIENT_NAME = re.compile(r"(^|/)(gradients(_\d+)?|gradient_tape)/")
_PASS_THROUGH = SYNTHETIC | {"Identity", "RefIdentity"}


def is_write(op_type: str) -> bool:
    return op_type in ASSIGN_OPS or op_type.startswith(APPLY_PREFIXES)


def written_variables(flat: FlatGraph, node: int, variables: set[int]) -> set[int]:
    """The variable/resource root nodes the write op `node` targets (input 0)."""
    if not flat.inputs[node]:
        return set()
    roots: set[int] = set()
    seen: set[int] = set()
    stack = [flat.inputs[node][0][0]]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n in variables or flat.types[n] not in _PASS_THROUGH or not flat.inputs[n]:
            roots.add(n)
            continue
        stack.extend(src for src, _ in flat.inputs[n])
    return roots


def gradient_nodes(flat: FlatGraph) -> list[int]:
    """Nodes TF created to compute a gradient (by their name scope)."""
    return [
        n for n, name in enumerate(flat.names) if "gradient" in name and GRADIENT_NAME.search(name)
    ]


def gradient_writes(
    flat: FlatGraph, variables: set[int], seeds: list[int] | None = None
) -> dict[int, set[int]]:
    """Write nodes fed by a gradient -> the model variable nodes they update.

    `seeds` are the gradient ops to start from (default: every gradient op,
    and every apply op counts whether or not a gradient op is seen feeding it).
    """
    consumers = flat.consumers()
    types = flat.types
    tainted = bytearray(len(flat))
    stack = list(gradient_nodes(flat) if seeds is None else seeds)
    for n in stack:
        tainted[n] = 1
    writes: dict[int, set[int]] = {}
    for n, op_type in enumerate(types if seeds is None else ()):
        if op_type.startswith(APPLY_PREFIXES):
            targets = written_variables(flat, n, variables)
            if targets & variables:
                writes[n] = targets & variables
    while stack:
        n = stack.pop()
        if is_write(types[n]):
            targets = written_variables(flat, n, variables)
            if targets & variables:
                writes.setdefault(n, set()).update(targets & variables)
            for state in targets - variables:
                if not tainted[state]:
                    tainted[state] = 1
                    stack.append(state)
            continue
        for c in consumers[n]:
            if not tainted[c] and c not in variables:
                tainted[c] = 1
                stack.append(c)
    return writes


def gradient_seeds_by_loss(flat: FlatGraph, cones: dict[str, bytearray]) -> dict[str, list[int]]:
    """The gradient ops each loss's gradient computation consists of.

    The gradient ops of one `tape.gradient`/`tf.gradients` call form a
    connected group; a group belongs to every loss whose forward cone holds a
    tensor the group reads and no other loss's cone holds. So an actor's
    gradient through the critic is not mistaken for the critic's update, while
    the gradient of `l1 + l2` belongs to both. Losses without a group are left
    out (the caller falls back to the graph-wide writes).
    """
    grads = gradient_nodes(flat)
    is_grad = bytearray(len(flat))
    for n in grads:
        is_grad[n] = 1
    parent = {n: n for n in grads}

    def find(n: int) -> int:
        while parent[n] != n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n

    for n in grads:
        for src, _ in flat.inputs[n]:
            if is_grad[src]:
                a, b = find(n), find(src)
                if a != b:
                    parent[a] = b
    groups: dict[int, list[int]] = {}
    for n in grads:
        groups.setdefault(find(n), []).append(n)
    owners = bytearray(len(flat))  # how many losses' cones hold each node (capped)
    for cone in cones.values():
        for n in range(len(flat)):
            if cone[n] and owners[n] < 2:
                owners[n] += 1
    seeds: dict[str, list[int]] = {}
    for members in groups.values():
        reads = {src for n in members for src, _ in flat.inputs[n] if not is_grad[src]}
        for name, cone in cones.items():
            if any(cone[r] and owners[r] == 1 for r in reads):
                seeds.setdefault(name, []).extend(members)
    return seeds


def upstream(flat: FlatGraph, starts: Iterable[int]) -> set[int]:
    """Nodes a train op runs: its data and control inputs, transitively."""
    seen: set[int] = set()
    stack = list(starts)
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        stack.extend(src for src, _ in flat.inputs[n])
        stack.extend(flat.control[n])
    return seen
