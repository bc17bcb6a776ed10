"""Parameters of the user's models -> scope names -> the scope layout.

Parameter `l1.weight` of model `online` is `online/l1/weight`, in scope
`online/l1`. Wrapper segments (`module.` of DataParallel/DDP, `_orig_mod.` of
`torch.compile`, `module.` of `swa_utils.AveragedModel`) never appear in
scope names. A parameter shared by two models keeps its first name.
Parameters only an optimizer knows (not in any model) are named
`opt<i>/group<j>/<k>`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tb_gradscope import scopes as scopes_lib

WRAPPER_SEGMENTS = ("module", "_orig_mod")
SEP = scopes_lib.SEPARATOR


def clean_name(dotted: str) -> str:
    """`module._orig_mod.l1.weight` -> `l1/weight` (wrapper segments dropped)."""
    return SEP.join(part for part in dotted.split(".") if part not in WRAPPER_SEGMENTS)


def model_tensors(
    root: str, model: torch.nn.Module, buffers: bool = False
) -> list[tuple[torch.Tensor, str]]:
    """(tensor, full name) of a model's parameters (and buffers), in module order."""
    named = list(model.named_parameters())
    if buffers:
        named += [(n, b) for n, b in model.named_buffers() if b.is_floating_point()]
    return [(t, f"{root}{SEP}{clean_name(n)}") for n, t in named]


@dataclasses.dataclass(frozen=True)
class NamedParameters:
    """Every recorded parameter, its full name and the scope layout over them."""

    params: tuple[torch.Tensor, ...]
    names: tuple[str, ...]
    layout: scopes_lib.ScopeLayout

    @property
    def index(self) -> dict[int, int]:
        """id(parameter) -> its position in `params`."""
        return {id(p): i for i, p in enumerate(self.params)}

    def scope_of(self, i: int) -> str:
        """The leaf scope of parameter i."""
        return self.layout.variable_leaf[i]


def name_parameters(
    models: Mapping[str, torch.nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
    spec: scopes_lib.ScopeSpec | None,
) -> NamedParameters:
    """The recorded parameters: every model's, then any optimizer's not in a model."""
    seen: dict[int, str] = {}
    items: list[tuple[torch.Tensor, str]] = []
    for root, model in models.items():
        _check_root(root, model)
        for p, name in model_tensors(root, model):
            if id(p) not in seen:
                seen[id(p)] = name
                items.append((p, name))
    for i, opt in enumerate(optimizers):
        for j, group in enumerate(opt.param_groups):
            for k, p in enumerate(group["params"]):
                if id(p) not in seen:
                    seen[id(p)] = name = f"opt{i}{SEP}group{j}{SEP}{k}"
                    items.append((p, name))
    if not items:
        raise ValueError(
            "the Recorder found no parameters: pass models={'online': net, ...} "
            "(or optimizers=[opt]) holding the parameters to record"
        )
    layout = scopes_lib.build_layout([n for _, n in items], spec)
    kept = set(layout.variable_names)
    items = [(p, n) for p, n in items if n in kept]
    return NamedParameters(
        params=tuple(p for p, _ in items), names=tuple(n for _, n in items), layout=layout
    )


def _check_root(root: Any, model: Any) -> None:
    if not isinstance(root, str) or not root or SEP in root:
        raise ValueError(
            f"models: the root name {root!r} must be a non-empty string without '/' "
            "(e.g. models={'online': q, 'target': q_target})"
        )
    if not isinstance(model, torch.nn.Module):
        raise TypeError(
            f"models['{root}'] is a {type(model).__name__}, not a torch.nn.Module; "
            "pass the model itself"
        )
