"""GAN, watched: generator and discriminator, two tapes, two optimizers, one custom
tf.function step (TensorFlow's DCGAN tutorial loop, on 2-D points).

Run: python gan.py LOGDIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder  # gradscope

LATENT, BATCH = 4, 64

keras.utils.set_random_seed(3)
generator = keras.Sequential([keras.Input((LATENT,)), keras.layers.Dense(16, activation="relu", name="hidden"),
                              keras.layers.Dense(2, name="out")], name="generator")
discriminator = keras.Sequential([keras.Input((2,)), keras.layers.Dense(16, activation="relu", name="hidden"),
                                  keras.layers.Dense(1, name="out")], name="discriminator")
generator_optimizer, discriminator_optimizer = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)
cross_entropy = keras.losses.BinaryCrossentropy(from_logits=True)
rec = Recorder(models=[generator, discriminator], rules=["only(gen_loss, [generator])"])  # gradscope


@rec.watch  # gradscope, was: @tf.function
def train_step(images, noise):
    with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
        generated = generator(noise, training=True)
        real_output = discriminator(images, training=True)
        fake_output = discriminator(generated, training=True)
        gen_loss = cross_entropy(tf.ones_like(fake_output), fake_output)
        disc_loss = (cross_entropy(tf.ones_like(real_output), real_output)
                     + cross_entropy(tf.zeros_like(fake_output), fake_output))
    gradients_of_generator = gen_tape.gradient(gen_loss, generator.trainable_variables)
    gradients_of_discriminator = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
    generator_optimizer.apply_gradients(zip(gradients_of_generator, generator.trainable_variables))
    discriminator_optimizer.apply_gradients(zip(gradients_of_discriminator, discriminator.trainable_variables))
    return gen_loss, disc_loss


rng = np.random.default_rng(3)
with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for step in range(30):
        images = (rng.normal(size=(BATCH, 2)) * [1.0, 0.2] + [2.0, -1.0]).astype("float32")
        gen_loss, disc_loss = train_step(images, rng.normal(size=(BATCH, LATENT)).astype("float32"))
        tf.summary.scalar("loss/generator", gen_loss, step=step)
        tf.summary.scalar("loss/discriminator", disc_loss, step=step)
