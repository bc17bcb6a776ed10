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
import tensorflow as tf

from tb_gradscope.demos import cartpole_dqn, common
from tb_gradscope.demos.cartpole_dqn import BATCH, GAMMA, RULES, Agent
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec
from tb_gradscope.record import StartPoint

CLIP_DELTA = 1.0


def train(spec: RunSpec) -> RunResult:
    """Trains one twin with RMSprop, DQN 3.0's optimizer family."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"dqn3_grad_start has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    common.seed_everything(spec.seed)
    outcome = cartpole_dqn.run(spec, _train_step)
    return RunResult({"td": outcome.td}, outcome.env_name)


def _train_step(agent: Agent):
    """DQN 3.0's update: backprop started at q_all with the clipped TD error
    (the leaky twin differentiates the squared TD error, target network included)."""
    online, target, rec = agent.online, agent.target, agent.recorder
    optimizer = keras.optimizers.RMSprop(2.5e-4)

    @tf.function(reduce_retracing=True)
    def train_step(s, a, r, s2, term):
        with rec.tape() as tape:
            q2_max = tf.reduce_max(target(s2), axis=1)
            q_all = online(s)
            q = tf.gather(q_all, a, axis=1, batch_dims=1)
            delta = r + GAMMA * (1.0 - term) * q2_max - q
            delta = tf.clip_by_value(delta, -CLIP_DELTA, CLIP_DELTA)
            td = 0.5 * tf.reduce_mean(tf.square(delta))
        if agent.leaky:
            start = td
        else:
            # targets[i][a_i] = delta_i; descent on -delta * dQ/dw.
            targets = tf.one_hot(a, agent.num_actions) * delta[:, None]
            start = StartPoint(q_all, output_gradients=-tf.stop_gradient(targets) / BATCH)
        rec.apply(optimizer, rec.gradients(tape, {"td": start}, agent.variables))
        return td

    return train_step


DEMO = Demo(
    name="dqn3_grad_start",
    title="DQN 3.0 update: gradient started at q_all with TD-error output gradients",
    leak="gradient taken from the squared TD error through the target network, "
    "optimizer over all variables",
    rules=RULES,
    train=train,
    default_steps=300,
)
