"""Gradient reach from PyTorch's own autograd graph.

A loss reaches a parameter when a walk of `grad_fn.next_functions` from the
loss meets the parameter's `AccumulateGrad` node (its `.variable`). The walk
also notes the custom `autograd.Function`s on the way: one whose backward
returns None for an input cuts the path although the graph still holds the
edge, which only the gradient itself tells (`none_gradients`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch


def walk(starts: Iterable[Any], expand: Callable[[Any], bool]) -> None:
    """Visits each node of the autograd graph below the `starts` nodes once,
    depth first; `expand(node)` sees it and says whether the walk goes on past it."""
    seen: set[int] = set()
    stack = list(starts)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if expand(node):
            stack.extend(nxt for nxt, _ in node.next_functions if nxt is not None)


def reached(root: torch.Tensor, param_index: Mapping[int, int]) -> tuple[set[int], list[str]]:
    """(indices of the parameters `root`'s graph reaches, names of custom Functions on it)."""
    if root.grad_fn is None:
        index = param_index.get(id(root))
        return ({index} if index is not None and root.requires_grad else set()), []
    found: set[int] = set()
    custom: list[str] = []

    def expand(node: Any) -> bool:
        variable = getattr(node, "variable", None)
        if variable is not None:  # a parameter's AccumulateGrad: the walk ends there
            index = param_index.get(id(variable))
            if index is not None:
                found.add(index)
            return False
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            custom.append(type(node).__name__)
        return True

    walk([root.grad_fn], expand)
    return found, custom


def none_gradients(
    root: torch.Tensor,
    grad: torch.Tensor | None,
    params: Sequence[torch.Tensor],
    indices: Sequence[int],
) -> set[int]:
    """Of the reached parameters `indices`, those whose gradient is None although
    the graph reaches them (a custom Function's backward returned None). The
    graph is kept (`retain_graph`); `.grad` is not touched."""
    if not indices:
        return set()
    grads = torch.autograd.grad(
        root,
        [params[i] for i in indices],
        grad_outputs=grad,
        retain_graph=True,
        allow_unused=True,
    )
    return {i for i, g in zip(indices, grads) if g is None}
