"""Gradient reach from PyTorch's own autograd graph.

A loss reaches a parameter when a walk of `grad_fn.next_functions` from the
loss meets the parameter's `AccumulateGrad` node (its `.variable`). The walk
also notes the custom `autograd.Function`s on the way: one whose backward
returns None for an input cuts the path although the graph still holds the
edge, which only the gradient itself tells (`none_gradients`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch


def reached(root: torch.Tensor, param_index: Mapping[int, int]) -> tuple[set[int], list[str]]:
    """(indices of the parameters `root`'s graph reaches, names of custom Functions on it)."""
    if root.grad_fn is None:
        index = param_index.get(id(root))
        return ({index} if index is not None and root.requires_grad else set()), []
    found: set[int] = set()
    custom: list[str] = []
    seen: set[int] = set()
    stack = [root.grad_fn]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        variable = getattr(node, "variable", None)
        if variable is not None:
            index = param_index.get(id(variable))
            if index is not None:
                found.add(index)
            continue
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            custom.append(type(node).__name__)
        stack.extend(nxt for nxt, _ in node.next_functions if nxt is not None)
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
