"""DDPG, watched: critic and actor updated one after the other in one tf.function.

Two tapes, two optimizers, Polyak targets; the TD target is computed before
the critic's tape opens. Run: python ddpg.py LOGDIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder  # gradscope

OBS, ACT, GAMMA, TAU = 3, 2, 0.99, 0.05


def mlp(name, inputs, outputs, activation=None):
    return keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(16, activation="relu", name="hidden"),
                             keras.layers.Dense(outputs, activation=activation, name="out")], name=name)


keras.utils.set_random_seed(0)
actor, target_actor = mlp("actor", OBS, ACT, "tanh"), mlp("target_actor", OBS, ACT, "tanh")
critic, target_critic = mlp("critic", OBS + ACT, 1), mlp("target_critic", OBS + ACT, 1)
target_actor.set_weights(actor.get_weights())
target_critic.set_weights(critic.get_weights())
actor_opt, critic_opt = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(2e-3)
rec = Recorder(models=[actor, critic, target_actor, target_critic], rules=["only(actor_loss, [actor])"])  # gradscope


@rec.watch  # gradscope, was: @tf.function
def train_step(s, a, r, s2):
    y = r + GAMMA * target_critic(tf.concat([s2, target_actor(s2)], 1))[:, 0]
    with tf.GradientTape() as tape:
        critic_loss = tf.reduce_mean(tf.square(y - critic(tf.concat([s, a], 1))[:, 0]))
    grads = tape.gradient(critic_loss, critic.trainable_variables)
    critic_opt.apply_gradients(zip(grads, critic.trainable_variables))
    with tf.GradientTape() as tape:
        actor_loss = -tf.reduce_mean(critic(tf.concat([s, actor(s)], 1)))
    grads = tape.gradient(actor_loss, actor.trainable_variables)
    actor_opt.apply_gradients(zip(grads, actor.trainable_variables))
    for target, online in ((target_actor, actor), (target_critic, critic)):
        for t, o in zip(target.weights, online.weights):
            t.assign((1 - TAU) * t + TAU * o)
    return critic_loss, actor_loss


rng = np.random.default_rng(0)
with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for step in range(30):
        s, s2 = rng.normal(size=(2, 32, OBS)).astype("float32")
        a = rng.uniform(-1, 1, (32, ACT)).astype("float32")
        critic_loss, actor_loss = train_step(s, a, rng.normal(size=32).astype("float32"), s2)
        tf.summary.scalar("loss/critic", critic_loss, step=step)
        tf.summary.scalar("loss/actor", actor_loss, step=step)
