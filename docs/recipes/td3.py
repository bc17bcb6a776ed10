"""TD3: twin critics every step; the actor and the targets every 2nd step.

The critic and the actor updates are two tf.functions; the loop calls the
actor's only on even iterations. Run: python td3.py LOGDIR
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
rec = Recorder(every_n_steps=10, models=[net for pair in nets for net in pair],  # gradscope
               rules=["only(critic, [critic1, critic2])", "only(actor, [actor])", "blocked(critic, target_*)"])


@tf.function
def update_critic(s, a, r, s2, noise):
    a2 = tf.clip_by_value(target_actor(s2) + tf.clip_by_value(0.2 * noise, -0.5, 0.5), -1.0, 1.0)
    q2 = tf.minimum(target_critic1(tf.concat([s2, a2], 1)), target_critic2(tf.concat([s2, a2], 1)))[:, 0]
    y = tf.stop_gradient(r + GAMMA * q2)
    critic_vars = critic1.trainable_variables + critic2.trainable_variables
    with tf.GradientTape() as tape:
        sa = tf.concat([s, a], 1)
        loss = tf.reduce_mean(tf.square(y - critic1(sa)[:, 0])) + tf.reduce_mean(tf.square(y - critic2(sa)[:, 0]))
    rec.apply(critic_opt, rec.gradients(tape, {"critic": loss}, critic_vars))  # gradscope
    return loss


@tf.function
def update_actor_and_targets(s):
    with tf.GradientTape() as tape:
        loss = -tf.reduce_mean(critic1(tf.concat([s, actor(s)], 1)))
    rec.apply(actor_opt, rec.gradients(tape, {"actor": loss}, actor.trainable_variables))  # gradscope
    for target, online in nets:
        for t, o in zip(target.weights, online.weights):
            t.assign((1 - TAU) * t + TAU * o)
    return loss


rng = np.random.default_rng(1)
with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for step in range(30):
        s, s2 = rng.normal(size=(2, 32, OBS)).astype("float32")
        a, noise = rng.uniform(-1, 1, (2, 32, ACT)).astype("float32")
        r = rng.normal(size=32).astype("float32")
        with rec.training_step():  # gradscope
            tf.summary.scalar("loss/critic", update_critic(s, a, r, s2, noise), step=step)
            if step % POLICY_DELAY == 0:
                tf.summary.scalar("loss/actor", update_actor_and_targets(s), step=step)
