"""BYOL (Mean-Teacher alike), watched: an online network and predictor learn to match
a target network that is the online one's exponential moving average.

The target's projection is computed before the tape opens; after each step the
target moves by Polyak averaging. Run: python byol.py LOGDIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder, pairs  # gradscope

FEATURES, TAU = 8, 0.05


def encoder(name):
    return keras.Sequential([keras.Input((FEATURES,)), keras.layers.Dense(16, activation="relu", name="hidden"),
                             keras.layers.Dense(4, name="projection")], name=name)


def augment(x, rng):
    return (x + 0.1 * rng.normal(size=x.shape)).astype("float32")


def cosine_loss(p, z):
    return tf.reduce_mean(2.0 - 2.0 * tf.reduce_sum(tf.math.l2_normalize(p, 1) * tf.math.l2_normalize(z, 1), 1))


keras.utils.set_random_seed(4)
online, target = encoder("online"), encoder("target")
predictor = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4, name="out")], name="predictor")
target.set_weights(online.get_weights())
optimizer = keras.optimizers.Adam(1e-3)
rec = Recorder(models=[online, predictor, target], pairs=[pairs.pair_models(target, online, tau=TAU)])  # gradscope


@rec.watch(losses={"loss": "byol"})  # gradscope, was: @tf.function
def train_step(view1, view2):
    z = target(view2)
    variables = online.trainable_variables + predictor.trainable_variables
    with tf.GradientTape() as tape:
        loss = cosine_loss(predictor(online(view1)), z)
    optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
    for t, o in zip(target.weights, online.weights):
        t.assign((1 - TAU) * t + TAU * o)
    return loss


rng = np.random.default_rng(4)
with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for step in range(30):
        x = rng.normal(size=(32, FEATURES))
        tf.summary.scalar("loss/byol", train_step(augment(x, rng), augment(x, rng)), step=step)
