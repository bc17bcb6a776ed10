"""SAC, watched: twin Q, a squashed Gaussian policy and an entropy temperature, each
with its own optimizer, updated one after the other in one tf.function.

Run: python sac.py LOGDIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder  # gradscope

OBS, ACT, GAMMA, TAU = 3, 2, 0.99, 0.05
TARGET_ENTROPY = -float(ACT)


def mlp(name, inputs, outputs):
    return keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(16, activation="relu", name="hidden"),
                             keras.layers.Dense(outputs, name="out")], name=name)


keras.utils.set_random_seed(2)
pi = mlp("pi", OBS, 2 * ACT)
q1, q2 = mlp("q1", OBS + ACT, 1), mlp("q2", OBS + ACT, 1)
target_q1, target_q2 = mlp("target_q1", OBS + ACT, 1), mlp("target_q2", OBS + ACT, 1)
target_q1.set_weights(q1.get_weights())
target_q2.set_weights(q2.get_weights())
log_alpha = tf.Variable(np.log(0.2), dtype=tf.float32, name="log_alpha")
q_opt, pi_opt, alpha_opt = keras.optimizers.Adam(2e-3), keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)
rec = Recorder(models=[pi, q1, q2, target_q1, target_q2], variables=[log_alpha])  # gradscope


def sample(s, noise):
    mean, log_std = tf.split(pi(s), 2, axis=1)
    log_std = tf.clip_by_value(log_std, -5.0, 2.0)
    action = tf.tanh(mean + tf.exp(log_std) * noise)
    logp = tf.reduce_sum(-0.5 * tf.square(noise) - log_std - 0.5 * np.log(2 * np.pi), axis=1)
    return action, logp - tf.reduce_sum(tf.math.log(1.0 - tf.square(action) + 1e-6), axis=1)


def min_q(nets, s, a):
    return tf.minimum(*[net(tf.concat([s, a], 1))[:, 0] for net in nets])


@rec.watch(losses={"q_loss": "q", "pi_loss": "pi", "alpha_loss": "alpha"})  # gradscope, was: @tf.function
def train_step(s, a, r, s2, noise):
    alpha = tf.exp(log_alpha)
    a2, logp2 = sample(s2, noise)
    y = tf.stop_gradient(r + GAMMA * (min_q((target_q1, target_q2), s2, a2) - alpha * logp2))
    q_vars = q1.trainable_variables + q2.trainable_variables
    with tf.GradientTape() as tape:
        sa = tf.concat([s, a], 1)
        q_loss = tf.reduce_mean(tf.square(q1(sa)[:, 0] - y)) + tf.reduce_mean(tf.square(q2(sa)[:, 0] - y))
    q_opt.apply_gradients(zip(tape.gradient(q_loss, q_vars), q_vars))
    with tf.GradientTape() as tape:
        new_a, logp = sample(s, noise)
        pi_loss = tf.reduce_mean(tf.exp(log_alpha) * logp - min_q((q1, q2), s, new_a))
    pi_opt.apply_gradients(zip(tape.gradient(pi_loss, pi.trainable_variables), pi.trainable_variables))
    with tf.GradientTape() as tape:
        alpha_loss = -tf.reduce_mean(log_alpha * (logp + TARGET_ENTROPY))
    alpha_opt.apply_gradients(zip(tape.gradient(alpha_loss, [log_alpha]), [log_alpha]))
    for target, online in ((target_q1, q1), (target_q2, q2)):
        for t, o in zip(target.weights, online.weights):
            t.assign((1 - TAU) * t + TAU * o)
    return q_loss, pi_loss, alpha_loss


rng = np.random.default_rng(2)
with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for step in range(30):
        s, s2 = rng.normal(size=(2, 32, OBS)).astype("float32")
        a, noise = rng.uniform(-1, 1, (32, ACT)).astype("float32"), rng.normal(size=(32, ACT)).astype("float32")
        losses = train_step(s, a, rng.normal(size=32).astype("float32"), s2, noise)
        for name, value in zip(("q", "pi", "alpha"), losses):
            tf.summary.scalar(f"loss/{name}", value, step=step)
