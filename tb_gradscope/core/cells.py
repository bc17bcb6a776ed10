"""A loss's flow state per scope from per-variable facts, for every analysis.

Both analyses (TF's graph walk, PyTorch's autograd graph and capture) find,
per loss and variable, whether the loss depends on it in the forward pass,
whether its gradient reaches it and whether an optimizer fed by the loss
applies it; these functions turn that into the FlowGraph's cells (a roll-up
scope takes the most flowing state of its variables) and its `trainable`
field. Plain Python.
"""

from __future__ import annotations

from collections.abc import Sequence

from tb_gradscope import scopes as scopes_lib
from tb_gradscope.format.flowgraph import (
    BLOCKED,
    IGNORED,
    INDEPENDENT,
    MIXED,
    NOT_TRAINABLE,
    TRAINABLE,
    UPDATES,
)

# Higher is "more flowing"; a roll-up scope takes the maximum of its children.
RANK = {INDEPENDENT: 0, BLOCKED: 1, IGNORED: 2, UPDATES: 3}
BY_RANK = {v: k for k, v in RANK.items()}


def cell_state(forward: int, gradient: int, applied: set[int] | None, index: int) -> str:
    """One variable's state: reached (applied or not), else blocked or independent."""
    if gradient:
        return UPDATES if applied is None or index in applied else IGNORED
    return BLOCKED if forward else INDEPENDENT


def roll_up(
    states: Sequence[str], leaves: Sequence[str], scope_list: Sequence[str]
) -> dict[str, str]:
    """Per-variable states -> {scope: state}, every scope the most flowing of its own."""
    best: dict[str, int] = {s: 0 for s in scope_list}
    for state, leaf in zip(states, leaves):
        rank = RANK[state]
        for scope in scopes_lib.ancestors(leaf):
            if scope in best and rank > best[scope]:
                best[scope] = rank
    return {s: BY_RANK[r] for s, r in best.items()}


def trainability(
    flags: Sequence[bool], leaves: Sequence[str], scope_list: Sequence[str]
) -> dict[str, str]:
    """Scope -> TRAINABLE / NOT_TRAINABLE / MIXED over the variables it holds."""
    seen: dict[str, set[bool]] = {}
    for flag, leaf in zip(flags, leaves):
        for scope in scopes_lib.ancestors(leaf):
            seen.setdefault(scope, set()).add(flag)
    words = {frozenset({True}): TRAINABLE, frozenset({False}): NOT_TRAINABLE}
    return {s: words.get(frozenset(seen[s]), MIXED) for s in scope_list if s in seen}
