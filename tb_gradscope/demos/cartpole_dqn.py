"""The CartPole DQN run the `dqn` and `dqn3_grad_start` demos share: all but the update.

Both demos train an online and a target network on CartPole with a replay
buffer, epsilon-greedy acting, a hard target copy every SYNC_EVERY steps and
the drift of the pair read after every step; they differ only in the optimizer
and in how the TD update's gradient is taken, which each demo writes as its own
`train_step` (`StepMaker`), the part a reader compares.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.demos import common, envs, recording
from tb_gradscope.demos.replay import ReplayBuffer
from tb_gradscope.demos.spec import LEAKY, RunSpec
from tb_gradscope.pairs import pair_models

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
    """What a demo's train step is built from.

    `variables` are what the optimizer updates: the online network's, plus the
    target network's in the leaky twin.
    """

    online: Any
    target: Any
    variables: list
    recorder: Any
    num_actions: int
    leaky: bool


# Builds the demo's train step: (s, a, r, s2, terminated) -> TD loss.
StepMaker = Callable[[Agent], Callable[..., tf.Tensor]]


@dataclasses.dataclass(frozen=True)
class Outcome:
    """The last TD loss, the returns of finished episodes, and the environment's name."""

    td: float
    returns: list
    env_name: str


def run(spec: RunSpec, make_train_step: StepMaker) -> Outcome:
    """Trains `spec.steps` optimizer steps with the train step `make_train_step` builds."""
    env = envs.make_cartpole(spec.seed, spec.env)
    online = common.mlp("online", env.observation_size, HIDDEN, env.num_actions)
    target = common.mlp("target", env.observation_size, HIDDEN, env.num_actions)
    common.hard_copy(online, target)
    leaky = spec.twin == LEAKY
    variables = online.trainable_variables + (target.trainable_variables if leaky else [])
    rec = recording.recorder(
        spec,
        {"online": online, "target": target},
        RULES,
        [pair_models(target, online, every=SYNC_EVERY)],
    )
    train_step = make_train_step(Agent(online, target, variables, rec, env.num_actions, leaky))

    @tf.function(reduce_retracing=True)
    def act(s):
        return online(s[None])[0]

    @tf.function(reduce_retracing=True)
    def sync():
        common.hard_copy(online, target)

    @tf.function(reduce_retracing=True)
    def record_drift():
        rec.record_drift()

    rng = np.random.default_rng(spec.seed)
    buffer = ReplayBuffer(4096, env.observation_size, spec.seed)
    s = env.reset()
    episode_return, returns = 0.0, []

    def env_step(eps: float) -> None:
        nonlocal s, episode_return
        a = common.epsilon_greedy(act(tf.constant(s)).numpy(), eps, rng)
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
        env_step(common.epsilon(step, spec.steps))
        td = float(train_step(*map(tf.constant, buffer.sample(BATCH))))
        if (step + 1) % SYNC_EVERY == 0:
            sync()
        record_drift()
        spec.on_step(step + 1)
    rec.close()
    return Outcome(td, returns, env.name)
