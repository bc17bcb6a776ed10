"""Demo `dqn`: a TF2 DQN with an online and a target network (seed 01).

The clean twin computes the TD target from the target network under
`tf.stop_gradient` and gives the optimizer only the online variables; the
target network moves only by a hard copy every `SYNC_EVERY` steps. The leaky
twin forgets the stop_gradient and hands the optimizer the target variables
too, so the TD loss trains the target network: its cells on `target/*` turn
to `updates` and the target scopes get a nonzero applied update.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.demos import common, envs, recording
from tb_gradscope.demos.replay import ReplayBuffer
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec
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


def train(spec: RunSpec) -> RunResult:
    """Trains one twin for `spec.steps` optimizer steps on CartPole."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"dqn has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    common.seed_everything(spec.seed)
    return _train(spec)


def _train(spec: RunSpec) -> RunResult:
    env = envs.make_cartpole(spec.seed, spec.env)
    online = common.mlp("online", env.observation_size, HIDDEN, env.num_actions)
    target = common.mlp("target", env.observation_size, HIDDEN, env.num_actions)
    common.hard_copy(online, target)
    optimizer = keras.optimizers.Adam(1e-3)
    leaky = spec.twin == LEAKY
    variables = online.trainable_variables + (target.trainable_variables if leaky else [])
    rec = recording.recorder(spec, {"online": online, "target": target}, RULES,
                             [pair_models(target, online, every=SYNC_EVERY)])

    @tf.function(reduce_retracing=True)
    def act(s):
        return online(s[None])[0]

    @tf.function(reduce_retracing=True)
    def sync():
        common.hard_copy(online, target)

    @tf.function(reduce_retracing=True)
    def record_drift():
        rec.record_drift()

    @tf.function(reduce_retracing=True)
    def train_step(s, a, r, s2, done):
        with rec.tape() as tape:
            q_next = tf.reduce_max(target(s2), axis=1)
            q_target = r + GAMMA * (1.0 - done) * q_next
            if not leaky:
                q_target = tf.stop_gradient(q_target)
            q_sa = tf.gather(online(s), a, axis=1, batch_dims=1)
            td = tf.reduce_mean(tf.square(q_target - q_sa))
        rec.apply(optimizer, rec.gradients(tape, {"td": td}, variables))
        return td

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
    mean_return = float(np.mean(returns[-10:])) if returns else float("nan")
    return RunResult({"td": td}, f"{env.name}, mean return of last episodes {mean_return:.1f}")


DEMO = Demo(
    name="dqn",
    title="TF2 DQN on CartPole: online + target network, hard target copy",
    leak="no stop_gradient on the TD target, and the target net in the optimizer's variables",
    rules=RULES,
    train=train,
    default_steps=300,
)
