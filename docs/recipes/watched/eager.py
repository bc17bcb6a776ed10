"""An eager loop (no tf.function), watched: a DQN whose TD target comes from a target
network copied every 10 steps, computed before the tape opens.

Run: python eager.py LOGDIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder  # gradscope

OBS, ACTIONS, GAMMA = 4, 2, 0.99


def q_net(name):
    return keras.Sequential([keras.Input((OBS,)), keras.layers.Dense(16, activation="relu", name="hidden"),
                             keras.layers.Dense(ACTIONS, name="q")], name=name)


keras.utils.set_random_seed(6)
online, target = q_net("online"), q_net("target")
target.set_weights(online.get_weights())
optimizer = keras.optimizers.Adam(1e-3)
rec = Recorder(models=[online, target], rules=["only(td, [online])", "blocked(td, target/*)"])  # gradscope


@rec.watch(eager=True, losses={"loss": "td"})  # gradscope
def train_step(s, a, r, s2):
    y = r + GAMMA * tf.reduce_max(target(s2), axis=1)
    with tf.GradientTape() as tape:
        loss = tf.reduce_mean(tf.square(y - tf.gather(online(s), a, batch_dims=1)))
    optimizer.apply_gradients(zip(tape.gradient(loss, online.trainable_variables), online.trainable_variables))
    return loss


rng = np.random.default_rng(6)
with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for step in range(30):
        s, s2 = rng.normal(size=(2, 32, OBS)).astype("float32")
        batch = (s, rng.integers(0, ACTIONS, 32), rng.normal(size=32).astype("float32"), s2)
        tf.summary.scalar("loss/td", train_step(*batch), step=step)
        if step % 10 == 9:
            target.set_weights(online.get_weights())
