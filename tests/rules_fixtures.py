"""Real training logs for the rules, CLI and testing-helper tests.

A shared-trunk actor-critic (`ac/trunk`, `ac/actor_head`, `ac/critic_head`)
trained on fixed random batches with the real Recorder, so the logs hold what
the analysis and the recorder really produced: the clean twin takes the
advantage under `tf.stop_gradient`, the leaky twin forgets it.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.record import Recorder

OBS, ACTIONS, HIDDEN, BATCH = 4, 2, 8, 16
LEAK_RULE = "never(actor, ac/critic_head)"


def build_model() -> keras.Model:
    obs = keras.Input((OBS,), name="obs")
    h = keras.layers.Dense(HIDDEN, activation="tanh", name="trunk")(obs)
    logits = keras.layers.Dense(ACTIONS, name="actor_head")(h)
    value = keras.layers.Dense(1, name="critic_head")(h)
    return keras.Model(obs, [logits, value], name="ac")


def actor_critic_losses(model: keras.Model, s, a, returns, leaky: bool) -> dict:
    """{'actor', 'critic'} losses; the leaky twin lets the actor loss reach the critic head."""
    logits, value = model(s)
    advantage = returns - value[:, 0]
    if not leaky:
        advantage = tf.stop_gradient(advantage)
    log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a, logits=logits)
    actor = -tf.reduce_mean(log_prob * advantage)
    critic = 0.5 * tf.reduce_mean(tf.square(returns - value[:, 0]))
    return {"actor": actor, "critic": critic}


def batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(BATCH, OBS)).astype(np.float32)
    a = rng.integers(0, ACTIONS, size=(BATCH,)).astype(np.int32)
    returns = rng.normal(loc=1.0, size=(BATCH,)).astype(np.float32)
    return tf.constant(s), tf.constant(a), tf.constant(returns)


def write_actor_critic_run(run_dir: str, leaky: bool, steps: int = 4, every_n_steps: int = 2) -> None:
    """Trains `steps` steps with the Recorder writing into `run_dir`."""
    keras.utils.set_random_seed(0)
    model = build_model()
    optimizer = keras.optimizers.SGD(0.05)
    rec = Recorder(logdir=run_dir, every_n_steps=every_n_steps, models={"ac": model})

    @tf.function
    def train_step(s, a, returns):
        with rec.tape() as tape:
            losses = actor_critic_losses(model, s, a, returns, leaky)
        rec.apply(optimizer, rec.gradients(tape, losses, model.trainable_variables))
        return losses

    s, a, returns = batch()
    for _ in range(steps):
        train_step(s, a, returns)
    rec.close()
