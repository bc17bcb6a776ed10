"""Losses as `rec.backward` takes them, the user's backward, and each loss's own gradient.

A loss is a scalar tensor, or a `StartPoint(tensor, grad)`: a gradient
started inside the model with explicit output gradients (DQN 3.0's
`q_all.backward(gradient=targets)`). The user's backward is
`sum(losses).backward()`, bitwise (with start points, one `torch.autograd.backward`
over the sum and the start points), so `.grad` is bitwise what the user's own
call gives. Several losses' own gradients come from `torch.autograd.grad` with
`retain_graph=True`, before the user's backward and without touching `.grad`:
every scalar loss in one batched (vmapped) backward, falling back to one
backward per loss where vmap cannot handle an op. A single loss's gradient is
the user's backward's own, seen by parameter hooks (`_recording`): no second
backward.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch


@dataclasses.dataclass(frozen=True, eq=False)
class StartPoint:
    """A gradient started inside the model: `tensor.backward(gradient=grad)` as a named loss.

    Example (DQN 3.0): `rec.backward({"td": StartPoint(q_all, targets)})`
    in place of `q_all.backward(gradient=targets)`.
    """

    tensor: torch.Tensor
    grad: torch.Tensor

    def __post_init__(self):
        if not isinstance(self.tensor, torch.Tensor) or not isinstance(self.grad, torch.Tensor):
            raise TypeError("StartPoint(tensor, grad) takes two tensors")
        if tuple(self.tensor.shape) != tuple(self.grad.shape):
            raise ValueError(
                f"StartPoint: grad has shape {tuple(self.grad.shape)} but the tensor has "
                f"{tuple(self.tensor.shape)}; pass one output gradient per element"
            )


def check_losses(losses: Any) -> dict[str, Any]:
    """{name: scalar tensor or StartPoint}, checked; errors say what to pass."""
    if not isinstance(losses, Mapping) or not losses:
        raise TypeError(
            "rec.backward takes a dict of named losses, e.g. rec.backward({'td': loss}); "
            f"got {type(losses).__name__}"
        )
    out = {}
    for name, value in losses.items():
        if not isinstance(name, str) or not name or "|" in name or "/" in name:
            raise ValueError(f"loss name {name!r}: use a non-empty string without '|' or '/'")
        if isinstance(value, StartPoint):
            out[name] = value
            continue
        if not isinstance(value, torch.Tensor):
            raise TypeError(
                f"loss '{name}' is a {type(value).__name__}, not a tensor; pass the loss "
                "tensor (or StartPoint(tensor, grad) for a gradient started inside the model)"
            )
        if value.numel() != 1:
            raise ValueError(
                f"loss '{name}' is not a scalar (shape {list(value.shape)}); pass "
                "loss.mean() or StartPoint(tensor, grad)"
            )
        out[name] = value
    return out


def tensor_of(loss: Any) -> torch.Tensor:
    return loss.tensor if isinstance(loss, StartPoint) else loss


def user_backward(losses: Mapping[str, Any], inputs: Any = None) -> None:
    """The user's backward: `sum(losses).backward()`, start points beside it."""
    scalars = [v for v in losses.values() if not isinstance(v, StartPoint)]
    starts = [v for v in losses.values() if isinstance(v, StartPoint)]
    if not starts:
        _total(scalars).backward(inputs=inputs)
        return
    tensors = ([_total(scalars)] if scalars else []) + [s.tensor for s in starts]
    grads = ([None] if scalars else []) + [s.grad for s in starts]
    torch.autograd.backward(tensors, grads, inputs=inputs)


def _total(scalars: Sequence[torch.Tensor]) -> torch.Tensor:
    """`sum(scalars)` without its leading `0 +` (one autograd node less): the
    same value and, the gradient of an add being exactly 1, the same `.grad`."""
    total = scalars[0]
    for loss in scalars[1:]:
        total = total + loss
    return total


def per_loss_gradients(
    losses: Mapping[str, Any], inputs: Sequence[torch.Tensor]
) -> list[torch.Tensor | None]:
    """For each input, [n_losses, *shape]: every loss's gradient (losses in
    order), or None when no loss reaches it; the graph is kept."""
    names = list(losses)
    if not inputs:
        return []
    parts: dict[str, list[torch.Tensor | None]] = {}
    scalars = [n for n in names if not isinstance(losses[n], StartPoint)]
    if len(scalars) > 1:
        batched = _batched([losses[n] for n in scalars], inputs)
        if batched is not None:
            for k, n in enumerate(scalars):
                parts[n] = [None if g is None else g[k] for g in batched]
    for n in names:
        if n not in parts:
            loss = losses[n]
            root, grad = (loss.tensor, loss.grad) if isinstance(loss, StartPoint) else (loss, None)
            parts[n] = list(
                torch.autograd.grad(
                    root, inputs, grad_outputs=grad, retain_graph=True, allow_unused=True
                )
            )
    out: list[torch.Tensor | None] = []
    for v, param in enumerate(inputs):
        column = [parts[n][v] for n in names]
        if all(g is None for g in column):
            out.append(None)
            continue
        out.append(torch.stack([torch.zeros_like(param) if g is None else g for g in column]))
    return out


def _batched(
    scalars: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]
) -> tuple[torch.Tensor | None, ...] | None:
    """Every scalar loss's gradients in one vmapped backward; None where vmap fails."""
    stacked = torch.stack([s.reshape(()) for s in scalars])
    eye = torch.eye(len(scalars), dtype=stacked.dtype, device=stacked.device)
    try:
        return torch.autograd.grad(
            stacked,
            inputs,
            grad_outputs=eye,
            is_grads_batched=True,
            retain_graph=True,
            allow_unused=True,
        )
    except Exception:  # noqa: BLE001 - an op vmap cannot batch: one backward per loss
        return None
