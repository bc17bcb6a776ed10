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
from typing import Iterable

from tb_gradscope.analysis.flatten import SYNTHETIC, FlatGraph

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


def gradient_writes(flat: FlatGraph, variables: set[int]) -> dict[int, set[int]]:
    """Write nodes fed by a gradient -> the model variable nodes they update."""
    consumers = flat.consumers()
    types = flat.types
    tainted = bytearray(len(flat))
    stack = [n for n, name in enumerate(flat.names) if GRADIENT_NAME.search(name)]
    for n in stack:
        tainted[n] = 1
    writes: dict[int, set[int]] = {}
    for n, op_type in enumerate(types):
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
