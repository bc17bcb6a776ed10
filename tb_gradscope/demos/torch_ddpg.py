"""Demo `torch_ddpg`: DDPG in PyTorch, an actor, a critic and their Polyak targets.

A deterministic actor mu(s) and a critic Q(s, a) learn to steer a point on a
plane to the origin (s2 = s + 0.1 a, reward -|s2|^2), from batches of random
transitions. Each step holds two optimizers, so it is one `with rec.step():`.
The clean twin takes the critic's TD loss (its target from the target actor
and critic under `torch.no_grad()`) through the critic's optimizer, then the
actor's loss -Q(s, mu(s)) through the actor's. The actor's gradient passes
through the critic to reach the actor, but the critic's optimizer does not
step after it: the `actor` cells on `critic` are `ignored`. The leaky twin
saves a backward: one `rec.backward` of both losses, then both optimizers'
steps. The critic's `.grad` now holds the actor's gradient too, which pushes
Q(s, mu(s)) up, and the critic's optimizer applies it: `updates`.
"""

from __future__ import annotations

import collections
import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tb_gradscope.demos import torch_common
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec

STATE = 2
ACTION = 2
HIDDEN = 32
GAMMA = 0.9
TAU = 0.05
BATCH = 64

RULES = (
    "never(actor, critic/*)",
    "only(critic, critic/*)",
    f"tracks(actor_target, actor, tau={TAU:g})",
    f"tracks(critic_target, critic, tau={TAU:g})",
)


def build_actor() -> nn.Module:
    """s -> a in [-1, 1]^ACTION (scopes `actor/l1`, `actor/mu`)."""
    return nn.Sequential(
        collections.OrderedDict(
            l1=nn.Linear(STATE, HIDDEN),
            relu=nn.ReLU(),
            mu=nn.Linear(HIDDEN, ACTION),
            tanh=nn.Tanh(),
        )
    )


class Critic(nn.Module):
    """(s, a) -> Q(s, a) (scopes `critic/l1`, `critic/q`)."""

    def __init__(self):
        super().__init__()
        self.l1 = nn.Linear(STATE + ACTION, HIDDEN)
        self.q = nn.Linear(HIDDEN, 1)

    def forward(self, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return self.q(torch.relu(self.l1(torch.cat([s, a], dim=1)))).squeeze(1)


def transitions(rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
    """A batch of (s, a, r, s2) from random states and actions."""
    s = rng.uniform(-1, 1, size=(BATCH, STATE)).astype(np.float32)
    a = rng.uniform(-1, 1, size=(BATCH, ACTION)).astype(np.float32)
    s2 = np.clip(s + 0.1 * a, -1, 1).astype(np.float32)
    r = -np.sum(s2**2, axis=1).astype(np.float32)
    return torch_common.tensors(s, a, r, s2)


def train(spec: RunSpec) -> RunResult:
    """Trains one twin: a critic step and an actor step per training step, then the Polyak targets."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"torch_ddpg has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    from tb_gradscope.torch import pair_models

    torch_common.seed_everything(spec.seed)
    actor, critic = build_actor(), Critic()
    actor_target, critic_target = copy.deepcopy(actor), copy.deepcopy(critic)
    actor_opt = torch.optim.Adam(actor.parameters(), 1e-3)
    critic_opt = torch.optim.Adam(critic.parameters(), 1e-3)
    models = {
        "actor": actor,
        "critic": critic,
        "actor_target": actor_target,
        "critic_target": critic_target,
    }
    rec = torch_common.recorder(
        spec,
        models,
        [actor_opt, critic_opt],
        RULES,
        [pair_models(actor_target, actor, tau=TAU), pair_models(critic_target, critic, tau=TAU)],
    )
    rng = np.random.default_rng(spec.seed)
    critic_loss = actor_loss = torch.tensor(float("nan"))
    for step in range(spec.steps):
        s, a, r, s2 = transitions(rng)
        with rec.step():  # two optimizers, one training step
            with torch.no_grad():
                y = r + GAMMA * critic_target(s2, actor_target(s2))
            critic_loss = F.mse_loss(critic(s, a), y)
            if spec.twin == LEAKY:  # one backward for both losses, then both steps
                actor_loss = -critic(s, actor(s)).mean()
                critic_opt.zero_grad()
                actor_opt.zero_grad()
                rec.backward({"critic": critic_loss, "actor": actor_loss})
                critic_opt.step()
                actor_opt.step()
            else:
                critic_opt.zero_grad()
                rec.backward({"critic": critic_loss})
                critic_opt.step()
                actor_loss = -critic(s, actor(s)).mean()
                actor_opt.zero_grad()
                rec.backward({"actor": actor_loss})
                actor_opt.step()
        torch_common.polyak(actor, actor_target, TAU)
        torch_common.polyak(critic, critic_target, TAU)
        spec.on_step(step + 1)
    rec.close()
    return RunResult({"critic": critic_loss.item(), "actor": actor_loss.item()})


DEMO = Demo(
    name="torch_ddpg",
    title="PyTorch DDPG: actor and critic with Polyak targets, two optimizers in rec.step()",
    leak="one backward of both losses before both optimizers step, so the actor loss steps the critic",
    rules=RULES,
    train=train,
    default_steps=300,
)
