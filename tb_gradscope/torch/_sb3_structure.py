"""What a Stable-Baselines3 algorithm is made of: the Recorder's models, optimizers and pairs.

Read off the algorithm object, as SB3 builds it (stable_baselines3 2.9):

- models: every `nn.Module` the algorithm holds by name (DQN `q_net`,
  `q_net_target`; SAC `actor`, `critic`, `critic_target`; TD3 those and
  `actor_target`), then a bare trained tensor (SAC's `log_ent_coef`, as scope
  `ent_coef`), then `policy` for whatever parameters are left (PPO and A2C:
  all of them). A parameter two models share keeps its first name.
- optimizers: `policy.optimizer`, each model's `.optimizer` and any optimizer
  the algorithm holds (`ent_coef_optimizer`).
- pairs: `X_target` follows `X`, at the rate the algorithm applies it (see
  `target_schedule`).

Needs no import of stable_baselines3 beyond the classes whose target update
it knows.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator
from typing import Any

import torch
from stable_baselines3 import DQN, SAC, TD3
from stable_baselines3.common.type_aliases import TrainFrequencyUnit

from tb_gradscope.torch._pairs import ModelPair, pair_models

POLICY = "policy"
TARGET_SUFFIX = "_target"


class TensorScope(torch.nn.Module):
    """A bare trained tensor (SAC's `log_ent_coef`) held as a model, so it is a scope.

    The tensor is the algorithm's own object (not a copy): the recorder finds
    it in the autograd graph and in the optimizer by identity."""

    def __init__(self, name: str, tensor: torch.Tensor):
        super().__init__()
        self._name = name
        self._tensor = tensor

    def named_parameters(
        self, prefix: str = "", recurse: bool = True, remove_duplicate: bool = True
    ) -> Iterator[tuple[str, torch.Tensor]]:
        yield (f"{prefix}.{self._name}" if prefix else self._name), self._tensor


@dataclasses.dataclass(frozen=True)
class Structure:
    """An algorithm's models (scope roots), optimizers, pairs and actor delay."""

    models: dict[str, torch.nn.Module]
    optimizers: list[torch.optim.Optimizer]
    pairs: list[ModelPair]
    # Gradient steps between two actor updates (TD3's policy_delay), else 1.
    actor_every: int = 1


def discover(algorithm: Any) -> Structure:
    """The Structure of an SB3 algorithm (DQN, SAC, TD3, PPO, A2C, or a subclass)."""
    policy = getattr(algorithm, "policy", None)
    if not isinstance(policy, torch.nn.Module):
        raise TypeError(
            f"GradscopeCallback: {type(algorithm).__name__} has no torch policy "
            "(algorithm.policy); use it with a Stable-Baselines3 algorithm (DQN, SAC, TD3, PPO, ...)"
        )
    attrs = [(n, v) for n, v in vars(algorithm).items() if not n.startswith("_")]
    models: dict[str, torch.nn.Module] = {
        n: v for n, v in attrs if isinstance(v, torch.nn.Module) and v is not policy
    }
    for name, value in attrs:
        if _trained_tensor(value):
            scope = name.removeprefix("log_")
            models[scope if scope not in models else name] = TensorScope(name, value)
    models[POLICY] = policy
    optimizers: list[torch.optim.Optimizer] = []
    for candidate in (
        [getattr(policy, "optimizer", None)]
        + [getattr(m, "optimizer", None) for m in models.values()]
        + [v for _, v in attrs]
    ):
        if isinstance(candidate, torch.optim.Optimizer) and not any(
            o is candidate for o in optimizers
        ):
            optimizers.append(candidate)
    tau, every = target_schedule(algorithm)
    pairs = [
        pair_models(target, models[name.removesuffix(TARGET_SUFFIX)], tau=tau, every=every)
        for name, target in models.items()
        if name.endswith(TARGET_SUFFIX) and name.removesuffix(TARGET_SUFFIX) in models
    ]
    delay = getattr(algorithm, "policy_delay", 1) if isinstance(algorithm, TD3) else 1
    return Structure(models, optimizers, pairs, max(int(delay), 1))


def target_schedule(algorithm: Any) -> tuple[float | None, int | None]:
    """(tau, every) of the algorithm's target update, in the Recorder's steps
    (one gradient step each); None where it is not one the read side can check.

    - SAC: Polyak with `tau` (0.005) at gradient steps whose index in each
      `train()` call is a multiple of `target_update_interval`.
    - TD3: Polyak with `tau` (0.005) with each delayed actor update, every
      `policy_delay` (2) gradient steps.
    - DQN: `polyak_update(q_net, q_net_target, tau)` every
      K = max(target_update_interval // n_envs, 1) calls of `env.step()`
      (`_on_step`), not gradient steps. With `train_freq` F env steps and
      `gradient_steps` G, that is every K / F * G gradient steps when F divides
      K (the default: 10000 // 1 / 4 * 1 = 2500); with tau = 1 (the default) a
      hard copy, declared `every=` that period when it is whole.
    - any other algorithm: no schedule declared (its drift is still recorded).
    """
    tau = getattr(algorithm, "tau", None)
    if not isinstance(algorithm, (DQN, SAC, TD3)) or not _rate(tau):
        return None, None
    tau = float(tau)
    if isinstance(algorithm, DQN) and tau == 1.0:
        return tau, dqn_copy_every(algorithm)
    return tau, None


def dqn_copy_every(algorithm: Any) -> int | None:
    """A DQN's hard-copy period in gradient steps, if it is a whole number (see `target_schedule`)."""
    freq = getattr(algorithm, "train_freq", None)
    grads = getattr(algorithm, "gradient_steps", 0)
    if getattr(freq, "unit", None) != TrainFrequencyUnit.STEP or grads < 1:
        return None  # episodes, or "as many as collected": no fixed period
    calls = max(int(algorithm.target_update_interval) // int(algorithm.n_envs), 1)
    if calls % freq.frequency:
        return None
    return calls // freq.frequency * grads


def steps_meeting(every_n_steps: int, actor_every: int) -> bool:
    """Whether recorded steps (s % every_n_steps == 0) meet every phase of an
    update made once per `actor_every` steps (they do when the two are coprime)."""
    return math.gcd(every_n_steps, actor_every) == 1


def _trained_tensor(value: Any) -> bool:
    return (
        isinstance(value, torch.Tensor)
        and not isinstance(value, torch.nn.Parameter)
        and value.is_leaf
        and value.requires_grad
    )


def _rate(tau: Any) -> bool:
    return isinstance(tau, (int, float)) and not isinstance(tau, bool) and 0.0 < tau <= 1.0
