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

from tb_gradscope.demos import cartpole_dqn, common
from tb_gradscope.demos.cartpole_dqn import BATCH, GAMMA, HIDDEN, RULES, SYNC_EVERY, Agent
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec

__all__ = ["BATCH", "DEMO", "GAMMA", "HIDDEN", "RULES", "SYNC_EVERY", "train"]


def train(spec: RunSpec) -> RunResult:
    """Trains one twin for `spec.steps` optimizer steps on CartPole."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"dqn has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    common.seed_everything(spec.seed)
    outcome = cartpole_dqn.run(spec, _train_step)
    mean_return = float(np.mean(outcome.returns[-10:])) if outcome.returns else float("nan")
    return RunResult(
        {"td": outcome.td}, f"{outcome.env_name}, mean return of last episodes {mean_return:.1f}"
    )


def _train_step(agent: Agent):
    """The TD update: its target under tf.stop_gradient (the leaky twin forgets it)."""
    online, target, rec = agent.online, agent.target, agent.recorder
    optimizer = keras.optimizers.Adam(1e-3)

    @tf.function(reduce_retracing=True)
    def train_step(s, a, r, s2, done):
        with rec.tape() as tape:
            q_next = tf.reduce_max(target(s2), axis=1)
            q_target = r + GAMMA * (1.0 - done) * q_next
            if not agent.leaky:
                q_target = tf.stop_gradient(q_target)
            q_sa = tf.gather(online(s), a, axis=1, batch_dims=1)
            td = tf.reduce_mean(tf.square(q_target - q_sa))
        rec.apply(optimizer, rec.gradients(tape, {"td": td}, agent.variables))
        return td

    return train_step


DEMO = Demo(
    name="dqn",
    title="TF2 DQN on CartPole: online + target network, hard target copy",
    leak="no stop_gradient on the TD target, and the target net in the optimizer's variables",
    rules=RULES,
    train=train,
    default_steps=300,
)
