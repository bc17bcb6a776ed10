"""Which losses' gradients each parameter's `.grad` holds, followed through `zero_grad`.

A loss is applied to a parameter when an optimizer step over that parameter
finds the loss's gradient still in `.grad`. After each backward the ledger
notes, per parameter the backward reached, the losses now in `.grad` and a
token of the gradient (the tensor, by weak reference, and its version). A
later look keeps those losses when `.grad` is the same tensor unchanged; a
`.grad` set to None discards them, and a changed one (zeroed in place, or
clipped) keeps them only if it is not all zeros (one batched host transfer,
at analysed steps only). Gradients given to `record_gradients` are held
until the parameter's `.grad` is None at a step (the user sets `.grad`).
So an optimizer whose `zero_grad()` ran after a loss's backward does not
apply it, and a parameter in several optimizers is applied by each.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable, Mapping, Sequence

import torch

from tb_gradscope.torch import _torch_private as private

# The token of a gradient handed to record_gradients: any non-None .grad holds it.
_GIVEN = "given"


class GradLedger:
    """Per parameter index: the losses whose gradient its `.grad` holds."""

    def __init__(self, params: Sequence[torch.Tensor]):
        self._params = params
        self._held: dict[int, set[str]] = {}
        self._tokens: dict[int, object] = {}
        self._before: dict[int, object] = {}

    def before_backward(self, indices: Iterable[int]) -> None:
        """Before a backward over `indices`: forget what was discarded since."""
        indices = list(indices)
        self._settle(indices)
        self._before = {i: _token(self._params[i].grad) for i in indices}

    def after_backward(self, reach: Mapping[str, Iterable[int]]) -> None:
        """After the backward of losses {name: reached indices}: those whose
        `.grad` changed now hold the losses too."""
        for name, indices in reach.items():
            for i in indices:
                grad = self._params[i].grad
                if grad is None or _same(self._before.get(i), grad):
                    continue  # the backward left .grad alone (inputs=, no gradient)
                self._held.setdefault(i, set()).add(name)
        for i in self._before:
            if i in self._held:
                self._tokens[i] = _token(self._params[i].grad)
        self._before = {}

    def given(self, reach: Mapping[str, Iterable[int]]) -> None:
        """Gradients the user computed (`record_gradients`) feed the next step."""
        for name, indices in reach.items():
            for i in indices:
                self._held.setdefault(i, set()).add(name)
                self._tokens[i] = _GIVEN

    def consumed(self, indices: Iterable[int]) -> dict[str, set[int]]:
        """At an optimizer step over `indices`: {loss: indices whose .grad holds it}."""
        indices = [i for i in indices if i in self._held]
        self._settle(indices)
        out: dict[str, set[int]] = {}
        for i in indices:
            for name in self._held.get(i, ()):
                out.setdefault(name, set()).add(i)
        return out

    def _settle(self, indices: Sequence[int]) -> None:
        """Drops the losses of parameters whose `.grad` was discarded."""
        changed = []
        for i in indices:
            if i not in self._held:
                continue
            grad = self._params[i].grad
            token = self._tokens.get(i)
            if grad is None:
                del self._held[i]
            elif token is not _GIVEN and not _same(token, grad):
                changed.append(i)
        if not changed:
            return
        zero = _all_zero([self._params[i].grad for i in changed])
        for i, is_zero in zip(changed, zero):
            if is_zero:
                del self._held[i]
            else:
                self._tokens[i] = _token(self._params[i].grad)


def _all_zero(grads: Sequence[torch.Tensor]) -> list[bool]:
    """Whether each gradient is all zeros: one grouped max |g| and one host transfer."""
    peaks = private.foreach_norm(grads, float("inf"))
    device = peaks[0].device
    return torch.stack([p.float().to(device) for p in peaks]).eq(0).tolist()


def _token(grad: torch.Tensor | None) -> object:
    if grad is None:
        return None
    return (weakref.ref(grad), private.version(grad))


def _same(token: object, grad: torch.Tensor) -> bool:
    """Whether `grad` is the very tensor of `token`, unchanged since."""
    if not isinstance(token, tuple):
        return False
    ref, version = token
    return ref() is grad and private.version(grad) == version
