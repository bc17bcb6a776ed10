"""Demo `dqn3_grad_start`: DQN 3.0's update, the gradient started at the Q output (seed 02).

DeepMind's DQN 3.0 computes the clipped TD error outside autodiff and calls
`network:backward(s, targets)` with `targets[i][a_i] = delta_i`: backprop
starts at the online network's output `q_all`, never touching the target
network. The clean twin does that in TF2 with `tape.gradient(q_all, variables,
output_gradients=-targets)`. The leaky twin is what the seed's author first
wrote: the gradient of a squared TD error taken from the final op, through the
TD computation and the target network, with the optimizer over every trainable
variable (TF1's `minimize` default), so the target network learns from the TD
error.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.demos import common, envs, recording
from tb_gradscope.demos.replay import ReplayBuffer
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec
from tb_gradscope.pairs import pair_models
from tb_gradscope.record import StartPoint

GAMMA = 0.99
BATCH = 32
SYNC_EVERY = 25
WARMUP = 64
CLIP_DELTA = 1.0
HIDDEN = (32, 32)

RULES = (
    "never(td, target/*)",
    "only(td, online/*)",
    f"tracks(target, online, every={SYNC_EVERY})",
)


def train(spec: RunSpec) -> RunResult:
    """Trains one twin with RMSprop, DQN 3.0's optimizer family."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(
            f"dqn3_grad_start has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}"
        )
    common.seed_everything(spec.seed)
    return _train(spec)


def _train(spec: RunSpec) -> RunResult:
    env = envs.make_cartpole(spec.seed, spec.env)
    online = common.mlp("online", env.observation_size, HIDDEN, env.num_actions)
    target = common.mlp("target", env.observation_size, HIDDEN, env.num_actions)
    common.hard_copy(online, target)
    optimizer = keras.optimizers.RMSprop(2.5e-4)
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
    def train_step(s, a, r, s2, term):
        with rec.tape() as tape:
            q2_max = tf.reduce_max(target(s2), axis=1)
            q_all = online(s)
            q = tf.gather(q_all, a, axis=1, batch_dims=1)
            delta = r + GAMMA * (1.0 - term) * q2_max - q
            delta = tf.clip_by_value(delta, -CLIP_DELTA, CLIP_DELTA)
            td = 0.5 * tf.reduce_mean(tf.square(delta))
        if leaky:
            start = td
        else:
            # targets[i][a_i] = delta_i; descent on -delta * dQ/dw.
            targets = tf.one_hot(a, env.num_actions) * delta[:, None]
            start = StartPoint(q_all, output_gradients=-tf.stop_gradient(targets) / BATCH)
        rec.apply(optimizer, rec.gradients(tape, {"td": start}, variables))
        return td

    rng = np.random.default_rng(spec.seed)
    buffer = ReplayBuffer(4096, env.observation_size, spec.seed)
    s = env.reset()

    def env_step(eps: float) -> None:
        nonlocal s
        a = common.epsilon_greedy(act(tf.constant(s)).numpy(), eps, rng)
        s2, r, terminated, truncated = env.step(a)
        buffer.add(s, a, r, s2, terminated)
        s = env.reset() if terminated or truncated else s2

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
    return RunResult({"td": td}, env.name)


DEMO = Demo(
    name="dqn3_grad_start",
    title="DQN 3.0 update: gradient started at q_all with TD-error output gradients",
    leak="gradient taken from the squared TD error through the target network, "
    "optimizer over all variables",
    rules=RULES,
    train=train,
    default_steps=300,
)
