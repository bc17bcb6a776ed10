"""Small pieces the PyTorch shapes share, so each shape file reads as its training loop.

Seeded data, tiny models (tanh, a few units: a zero gradient is then a flow
fact, not a dead unit), target updates and probe builders. Data is a pure
function of the step.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from tests.support.torch_corpus import oracle
from tests.support.torch_corpus.spec import PairProbe

OBS, ACTIONS, BATCH = 3, 2, 8


def seed(n: int) -> None:
    torch.manual_seed(n)


def mlp(sizes: Sequence[int], inputs: int = OBS) -> nn.Sequential:
    """Linear layers `l1`, `l2`, ... with tanh between them, the last one linear."""
    layers: dict[str, nn.Module] = collections.OrderedDict()
    width = inputs
    for i, size in enumerate(sizes):
        layers[f"l{i + 1}"] = nn.Linear(width, size)
        if i < len(sizes) - 1:
            layers[f"act{i + 1}"] = nn.Tanh()
        width = size
    return nn.Sequential(layers)


def batch(step: int, obs: int = OBS, actions: int = ACTIONS, n: int = BATCH) -> dict[str, Any]:
    """A transition batch that is a pure function of `step`."""
    rng = np.random.default_rng(1000 + step)

    def f(x):
        return torch.tensor(x, dtype=torch.float32)

    return {
        "s": f(rng.normal(size=(n, obs))),
        "a": torch.tensor(rng.integers(0, actions, size=n), dtype=torch.long),
        "a_cont": f(rng.uniform(-1, 1, size=(n, actions))),
        "r": f(rng.normal(size=n)),
        "s2": f(rng.normal(size=(n, obs))),
        "done": f((rng.uniform(size=n) < 0.2).astype(np.float32)),
        "noise": f(rng.normal(size=(n, actions))),
        "y": f(rng.normal(size=(n, 1))),
    }


def copy_weights(target: nn.Module, online: nn.Module) -> None:
    target.load_state_dict(online.state_dict())


@torch.no_grad()
def polyak(target: nn.Module, online: nn.Module, tau: float) -> None:
    """target <- (1 - tau) target + tau online, the hand-written Polyak average."""
    for t, o in zip(target.parameters(), online.parameters()):
        t.mul_(1.0 - tau).add_(o, alpha=tau)


def pair_probe(target: nn.Module, online: nn.Module, roots: tuple[str, str]) -> PairProbe:
    """The probe of the pair `roots[0]<-roots[1]` (the product's name for a pair
    of models under those `models=` keys), parameter by parameter."""
    named = oracle.named_parameters({roots[0]: target})
    return PairProbe(f"{roots[0]}<-{roots[1]}", named, list(online.parameters()))


def parameters(*modules: nn.Module) -> list[nn.Parameter]:
    return [p for m in modules for p in m.parameters()]


def models_of(**models: nn.Module) -> Mapping[str, nn.Module]:
    return dict(models)
