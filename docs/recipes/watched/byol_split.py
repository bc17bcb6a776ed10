"""BYOL with one optimizer applied three times per step, to the encoder, the
projector and the predictor in turn (disjoint variable lists), as code that
keeps `optimizer.iterations` counting applies (3 per step) has it.

The target encoder and projector are computed before the tape opens and follow
the online ones by Polyak averaging. Run: python byol_split.py LOGDIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder  # gradscope

FEATURES, TAU = 8, 0.05


def dense(name, inputs, units, hidden=16):
    return keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(hidden, activation="relu", name="hidden"),
                             keras.layers.Dense(units, name="out")], name=name)


def augment(x, rng):
    return (x + 0.1 * rng.normal(size=x.shape)).astype("float32")


def cosine_loss(p, z):
    return tf.reduce_mean(2.0 - 2.0 * tf.reduce_sum(tf.math.l2_normalize(p, 1) * tf.math.l2_normalize(z, 1), 1))


keras.utils.set_random_seed(5)
encoder, target_encoder = dense("encoder", FEATURES, 8), dense("target_encoder", FEATURES, 8)
projector, target_projector = dense("projector", 8, 4), dense("target_projector", 8, 4)
predictor = dense("predictor", 4, 4)
target_encoder.set_weights(encoder.get_weights())
target_projector.set_weights(projector.get_weights())
optimizer = keras.optimizers.Adam(1e-3)
optimizer.build(encoder.trainable_variables + projector.trainable_variables + predictor.trainable_variables)
rec = Recorder(models=[encoder, projector, predictor, target_encoder, target_projector])  # gradscope


@rec.watch(losses={"loss": "byol"})  # gradscope, was: @tf.function
def train_step(view1, view2):
    z = target_projector(target_encoder(view2))
    parts = [encoder.trainable_variables, projector.trainable_variables, predictor.trainable_variables]
    with tf.GradientTape() as tape:
        loss = cosine_loss(predictor(projector(encoder(view1))), z)
    grads = tape.gradient(loss, parts)
    for part_grads, part in zip(grads, parts):
        optimizer.apply_gradients(zip(part_grads, part))
    for target, online in ((target_encoder, encoder), (target_projector, projector)):
        for t, o in zip(target.weights, online.weights):
            t.assign((1 - TAU) * t + TAU * o)
    return loss


rng = np.random.default_rng(5)
with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for step in range(30):
        x = rng.normal(size=(32, FEATURES))
        tf.summary.scalar("loss/byol", train_step(augment(x, rng), augment(x, rng)), step=step)
