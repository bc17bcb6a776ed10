"""Target/online pairs of PyTorch models: declared with `pair_models`, or found (`pairs="auto"`).

`pair_models(target, online, tau=|every=)` names two modules; the Recorder
resolves it into a `core.pairs.Pair` once it knows the models' root names.
Both sides hold parameters and floating-point buffers (BatchNorm running
statistics are state a target update must copy too); names are matched
relative to each model (`l1.weight`), else by order with equal shapes.
`torch.optim.swa_utils.AveragedModel` is recognised: its `module.` prefix is
not a scope and its `n_averaged` counter is not paired.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import torch

from tb_gradscope import scopes as scopes_lib
from tb_gradscope.core.pairs import Pair, check_schedule, make_pair
from tb_gradscope.torch._names import model_tensors


@dataclasses.dataclass(frozen=True, eq=False)
class ModelPair:
    """A declared pair of two modules, resolved by the Recorder (`resolve`)."""

    target: torch.nn.Module
    online: torch.nn.Module
    tau: float | None = None
    every: int | None = None
    name: str | None = None


def pair_models(
    target: torch.nn.Module,
    online: torch.nn.Module,
    tau: float | None = None,
    every: int | None = None,
    name: str | None = None,
) -> ModelPair:
    """Declares that `target` follows `online`: an EMA with rate `tau`
    (target <- (1 - tau) target + tau online) or a hard copy every `every` steps.

    Pass the result in `Recorder(..., pairs=[...])`. Either model may be an
    `AveragedModel` or a module of the Recorder's `models`; their root names
    there name the pair (`target<-online`).
    """
    for side, model in (("target", target), ("online", online)):
        if not isinstance(model, torch.nn.Module):
            raise TypeError(
                f"pair_models: {side} is a {type(model).__name__}, not a torch.nn.Module"
            )
    if target is online:
        raise ValueError("pair_models: target and online are the same module; pass two models")
    check_schedule(name or "pair_models", tau, every)
    return ModelPair(target, online, tau, every, name)


def resolve(pair: ModelPair, models: Mapping[str, torch.nn.Module]) -> Pair:
    """The Pair of a declared ModelPair, its sides named by their roots in `models`."""
    t_root = _root_of(pair.target, models, "target")
    o_root = _root_of(pair.online, models, "online")
    if t_root == o_root:
        raise ValueError(
            f"pair_models: both models are named '{t_root}'; give them distinct names in models="
        )
    t_items = model_tensors(t_root, pair.target, buffers=True)
    o_items = model_tensors(o_root, pair.online, buffers=True)
    if len(t_items) != len(o_items):
        raise ValueError(
            f"pair_models: target '{t_root}' has {len(t_items)} parameters and buffers but "
            f"online '{o_root}' has {len(o_items)}; pair two copies of the same architecture"
        )
    return make_pair(
        pair.name or f"{t_root}<-{o_root}",
        t_items,
        o_items,
        t_root,
        o_root,
        pair.tau,
        pair.every,
        is_state=lambda t: not isinstance(t, torch.nn.Parameter),
    )


def detect(
    models: Mapping[str, torch.nn.Module], optimizers: Sequence[torch.optim.Optimizer]
) -> list[ModelPair]:
    """Pairs found among `models`: a target is an `AveragedModel`, a model named
    like a target (`target`, `ema`, `teacher`, ...), or a copy no optimizer
    steps while its twin is stepped; its online model has the same parameter
    names and shapes."""
    stepped = {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
    found = []
    for t_root, target in models.items():
        t_params = list(target.parameters())
        looks_target = (
            isinstance(target, torch.optim.swa_utils.AveragedModel)
            or scopes_lib.segment_role(t_root)[0] == "target"
            or (stepped and not any(id(p) in stepped for p in t_params))
        )
        if not looks_target:
            continue
        for online in models.values():
            if online is target or not _same_shape(target, online):
                continue
            if any(id(p) in stepped for p in online.parameters()) or not stepped:
                found.append(ModelPair(target, online))
                break
    return found


def _same_shape(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    sa = [(n, tuple(t.shape)) for t, n in model_tensors("", a)]
    sb = [(n, tuple(t.shape)) for t, n in model_tensors("", b)]
    return bool(sa) and sa == sb


def _root_of(model: torch.nn.Module, models: Mapping[str, torch.nn.Module], default: str) -> str:
    for root, known in models.items():
        if known is model or getattr(model, "module", None) is known:
            return root
    return default
