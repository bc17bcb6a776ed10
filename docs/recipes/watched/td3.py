"""TD3, watched: twin critics every step; the actor and the targets every 2nd step.

One tf.function; the loop tells it on which iterations (the even ones) the
actor and the targets are updated. Run: python td3.py LOGDIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder  # gradscope

OBS, ACT, GAMMA, TAU, POLICY_DELAY = 3, 2, 0.99, 0.05, 2


def mlp(name, inputs, outputs, activation=None):
    return keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(16, activation="relu", name="hidden"),
                             keras.layers.Dense(outputs, activation=activation, name="out")], name=name)


keras.utils.set_random_seed(1)
actor, target_actor = mlp("actor", OBS, ACT, "tanh"), mlp("target_actor", OBS, ACT, "tanh")
critic1, target_critic1 = mlp("critic1", OBS + ACT, 1), mlp("target_critic1", OBS + ACT, 1)
critic2, target_critic2 = mlp("critic2", OBS + ACT, 1), mlp("target_critic2", OBS + ACT, 1)
nets = [(target_actor, actor), (target_critic1, critic1), (target_critic2, critic2)]
for target, online in nets:
    target.set_weights(online.get_weights())
actor_opt, critic_opt = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(2e-3)
rec = Recorder(every_n_steps=10, models=[net for pair in nets for net in pair])  # gradscope


@rec.watch(losses={"critic_loss": "critic", "actor_loss": "actor"})  # gradscope, was: @tf.function
def train_step(s, a, r, s2, noise, update_actor):
    a2 = tf.clip_by_value(target_actor(s2) + tf.clip_by_value(0.2 * noise, -0.5, 0.5), -1.0, 1.0)
    q2 = tf.minimum(target_critic1(tf.concat([s2, a2], 1)), target_critic2(tf.concat([s2, a2], 1)))[:, 0]
    y = tf.stop_gradient(r + GAMMA * q2)
    critic_vars = critic1.trainable_variables + critic2.trainable_variables
    with tf.GradientTape() as tape:
        sa = tf.concat([s, a], 1)
        critic_loss = tf.reduce_mean(tf.square(y - critic1(sa)[:, 0])) + tf.reduce_mean(tf.square(y - critic2(sa)[:, 0]))
    critic_opt.apply_gradients(zip(tape.gradient(critic_loss, critic_vars), critic_vars))
    if not update_actor:  # a Python bool: one trace each way
        return critic_loss, 0.0
    with tf.GradientTape() as tape:
        actor_loss = -tf.reduce_mean(critic1(tf.concat([s, actor(s)], 1)))
    actor_opt.apply_gradients(zip(tape.gradient(actor_loss, actor.trainable_variables), actor.trainable_variables))
    for target, online in nets:
        for t, o in zip(target.weights, online.weights):
            t.assign((1 - TAU) * t + TAU * o)
    return critic_loss, actor_loss


rng = np.random.default_rng(1)
with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for step in range(30):
        s, s2 = rng.normal(size=(2, 32, OBS)).astype("float32")
        a, noise = rng.uniform(-1, 1, (2, 32, ACT)).astype("float32")
        r = rng.normal(size=32).astype("float32")
        critic_loss, actor_loss = train_step(s, a, r, s2, noise, step % POLICY_DELAY == 0)
        tf.summary.scalar("loss/critic", critic_loss, step=step)
        if step % POLICY_DELAY == 0:
            tf.summary.scalar("loss/actor", actor_loss, step=step)
