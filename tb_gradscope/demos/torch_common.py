"""Pieces the PyTorch demos share: seeding, small networks, target updates, the recorder.

Each PyTorch demo is the TF demo of the same seed scenario written the way
PyTorch code is written: `nn.Module`s, `torch.optim` optimizers and their param
groups, `.detach()` / `torch.no_grad()` where the TF demo has
`tf.stop_gradient`, and `tb_gradscope.torch.Recorder` in place of
`loss.backward()`. Imports torch, never tensorflow.
"""

from __future__ import annotations

import collections
import random
from collections.abc import Mapping, Sequence

import numpy as np
import torch
from torch import nn

from tb_gradscope.demos.spec import RunSpec


def seed_everything(seed: int) -> None:
    """Makes a run repeatable on CPU: seeded RNGs, deterministic kernels, one thread.

    One intra-op thread keeps reductions in one order whatever the machine's
    core count, so a run's numbers do not depend on where it ran.
    """
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)


def mlp(input_size: int, hidden: Sequence[int], outputs: int, output_name: str = "q") -> nn.Module:
    """An MLP whose layers are named l1, l2, ... and `output_name` (scopes `<model>/l1`, ...)."""
    layers: collections.OrderedDict[str, nn.Module] = collections.OrderedDict()
    width = input_size
    for i, units in enumerate(hidden, start=1):
        layers[f"l{i}"] = nn.Linear(width, units)
        layers[f"relu{i}"] = nn.ReLU()
        width = units
    layers[output_name] = nn.Linear(width, outputs)
    return nn.Sequential(layers)


@torch.no_grad()
def hard_copy(online: nn.Module, target: nn.Module) -> None:
    """target <- online, parameter by parameter (a DQN target sync)."""
    for t, o in zip(target.parameters(), online.parameters()):
        t.copy_(o)


@torch.no_grad()
def polyak(online: nn.Module, target: nn.Module, tau: float) -> None:
    """target <- (1 - tau) * target + tau * online (Polyak averaging, in place)."""
    for t, o in zip(target.parameters(), online.parameters()):
        t.lerp_(o, tau)


def recorder(
    spec: RunSpec,
    models: Mapping[str, nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
    rules: Sequence[str],
    pairs: Sequence = (),
):
    """A `tb_gradscope.torch.Recorder` writing to `spec.run_dir`, scopes rooted at
    the model names, the demo's rules listed in the run.

    Violations are recorded, never raised: the leaky twin must train to the end
    so its broken rules are on record.
    """
    from tb_gradscope.torch import Recorder

    return Recorder(
        spec.run_dir,
        every_n_steps=spec.record_every,
        models=dict(models),
        optimizers=list(optimizers),
        pairs=list(pairs),
        rules=list(rules),
        on_violation="log",
    )


def tensors(*arrays: np.ndarray) -> tuple[torch.Tensor, ...]:
    """numpy arrays as torch tensors (integer arrays as int64, for indexing)."""
    return tuple(
        torch.from_numpy(a.astype(np.int64) if a.dtype.kind in "iu" else a) for a in arrays
    )
