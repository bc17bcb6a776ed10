"""The PyTorch CartPole DQN run `torch_dqn` and `torch_dqn3_grad_start` share: all but the update.

The same run as `cartpole_dqn` (replay buffer, epsilon-greedy acting, a hard
target copy every SYNC_EVERY steps), in PyTorch: an online and a target
`nn.Sequential`, one optimizer, and the recorder's `rec.backward` in place of
`loss.backward()`. Each demo writes its own `update` (`UpdateMaker`), the part
a reader compares.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable

import numpy as np
import torch
from torch import nn

from tb_gradscope.demos import acting, envs, torch_common
from tb_gradscope.demos.replay import ReplayBuffer
from tb_gradscope.demos.spec import LEAKY, RunSpec

GAMMA = 0.99
BATCH = 32
SYNC_EVERY = 25
WARMUP = 64
HIDDEN = (32, 32)

RULES = (
    "never(td, target/*)",
    "only(td, online/*)",
    f"tracks(target, online, every={SYNC_EVERY})",
)


@dataclasses.dataclass(frozen=True)
class Agent:
    """What a demo's update is built from: the networks, the recorder, the twin."""

    online: nn.Module
    target: nn.Module
    optimizer: torch.optim.Optimizer
    recorder: object
    num_actions: int
    leaky: bool


# Builds the demo's update: (agent) -> (s, a, r, s2, terminated) -> TD loss.
UpdateMaker = Callable[[Agent], Callable[..., torch.Tensor]]
OptimizerMaker = Callable[[list], torch.optim.Optimizer]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The last TD loss, the returns of finished episodes, and the environment's name."""

    td: float
    returns: list
    env_name: str


def run(spec: RunSpec, make_optimizer: OptimizerMaker, make_update: UpdateMaker) -> Outcome:
    """Trains `spec.steps` optimizer steps with the update `make_update` builds.

    The clean twin's optimizer holds the online parameters; the leaky twin's
    holds the target's too (`list(online.parameters()) + list(target.parameters())`).
    """
    from tb_gradscope.torch import pair_models

    env = envs.make_cartpole(spec.seed, spec.env)
    online = torch_common.mlp(env.observation_size, HIDDEN, env.num_actions)
    target = copy.deepcopy(online)
    leaky = spec.twin == LEAKY
    params = list(online.parameters()) + (list(target.parameters()) if leaky else [])
    optimizer = make_optimizer(params)
    rec = torch_common.recorder(
        spec,
        {"online": online, "target": target},
        [optimizer],
        RULES,
        [pair_models(target, online, every=SYNC_EVERY)],
    )
    update = make_update(Agent(online, target, optimizer, rec, env.num_actions, leaky))
    rng = np.random.default_rng(spec.seed)
    buffer = ReplayBuffer(4096, env.observation_size, spec.seed)
    s = env.reset()
    episode_return, returns = 0.0, []

    def env_step(eps: float) -> None:
        nonlocal s, episode_return
        with torch.no_grad():
            q_values = online(torch.from_numpy(s.astype(np.float32))[None])[0].numpy()
        a = acting.epsilon_greedy(q_values, eps, rng)
        s2, r, terminated, truncated = env.step(a)
        buffer.add(s, a, r, s2, terminated)
        episode_return += r
        s = s2
        if terminated or truncated:
            returns.append(episode_return)
            episode_return = 0.0
            s = env.reset()

    for _ in range(WARMUP):
        env_step(1.0)
    td = float("nan")
    for step in range(spec.steps):
        env_step(acting.epsilon(step, spec.steps))
        td = float(update(*torch_common.tensors(*buffer.sample(BATCH))))
        if (step + 1) % SYNC_EVERY == 0:
            torch_common.hard_copy(online, target)
        spec.on_step(step + 1)
    rec.close()
    return Outcome(td, returns, env.name)
