"""Keras `fit` shapes built from functional sub-models, recorded by the GradscopeCallback.

- fit_wgan_gp: a WGAN-GP as keras.io writes it: a `keras.Model` subclass holding a
  functional generator and critic, a custom `train_step` running three critic
  steps (Wasserstein loss plus a gradient penalty taken with a nested tape on
  interpolated samples) then one generator step, latent vectors and the
  interpolation weights drawn inside the step with `tf.random.normal`; mutant:
  the critic optimizer's variable list takes the generator's variables too.
- fit_functional_gan: a GAN whose generator and discriminator are functional
  models and whose generator is trained through a functional `combined` model
  (`discriminator(generator(z))`), one discriminator and one generator step per
  batch with the batch's noise; mutant: the generator's loss applied to the
  combined model's variables (the discriminator's too).

The rules name the sub-models as scopes (`wgan/generator`): a nested model is a
scope level. One batch, the same every time, so the oracle's probe (taken in
`on_train_batch_begin`) sees the step's inputs; where the step draws its own
noise the probe draws noise of the same shape once per step (flow facts do not
depend on the values drawn).
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.integrations.keras import GradscopeCallback
from tests.support.corpus import kit
from tests.support.corpus.shapes_keras import _Watch
from tests.support.corpus.spec import KERAS_FIT, Forward, Shape, StepProbe

STEPS = 4
LATENT = 2


def _functional(name: str, inputs: int, sizes: list[int], activation: str = "tanh") -> keras.Model:
    """A functional model as keras.io builds one: Input, Dense layers with Keras's own names."""
    x = keras.Input((inputs,))
    h = x
    for i, size in enumerate(sizes):
        h = keras.layers.Dense(size, activation=None if i == len(sizes) - 1 else activation)(h)
    return keras.Model(x, h, name=name)


def _taped(fn) -> Forward:
    with tf.GradientTape() as tape:
        value = fn()
    return Forward(tape, value)


# ----- WGAN-GP: critic steps with a gradient penalty, then a generator step ----------

WGAN_RULES = ("never(d_loss, wgan/generator)", "only(g_loss, [wgan/generator])")
D_STEPS, GP_WEIGHT = 3, 10.0


class WGAN(keras.Model):
    def __init__(self, leaky: bool):
        super().__init__(name="wgan")
        self.leaky = leaky
        self.generator = _functional("generator", LATENT, [4, kit.OBS])
        self.critic = _functional("critic", kit.OBS, [4, 1])

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer

    def gradient_penalty(self, real, fake, alpha):
        interpolated = real + alpha * (fake - real)
        with tf.GradientTape() as gp_tape:
            gp_tape.watch(interpolated)
            pred = self.critic(interpolated, training=True)
        grads = gp_tape.gradient(pred, [interpolated])[0]
        norm = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=[1]) + 1e-12)
        return tf.reduce_mean((norm - 1.0) ** 2)

    def d_loss(self, real, z, alpha):
        fake = self.generator(z, training=True)
        cost = tf.reduce_mean(self.critic(fake, training=True)) - tf.reduce_mean(
            self.critic(real, training=True)
        )
        return cost + GP_WEIGHT * self.gradient_penalty(real, fake, alpha)

    def g_loss(self, z):
        return -tf.reduce_mean(self.critic(self.generator(z, training=True), training=True))

    def d_variables(self):
        return self.critic.trainable_variables + (
            self.generator.trainable_variables if self.leaky else []
        )

    def train_step(self, real):
        batch = tf.shape(real)[0]
        for _ in range(D_STEPS):
            z = tf.random.normal((batch, LATENT))
            alpha = tf.random.normal((batch, 1), 0.0, 1.0)
            with tf.GradientTape() as tape:
                d_loss = self.d_loss(real, z, alpha)
            d_gradient = tape.gradient(d_loss, self.d_variables())
            self.d_optimizer.apply_gradients(zip(d_gradient, self.d_variables()))
        z = tf.random.normal((batch, LATENT))
        with tf.GradientTape() as tape:
            g_loss = self.g_loss(z)
        g_gradient = tape.gradient(g_loss, self.generator.trainable_variables)
        self.g_optimizer.apply_gradients(zip(g_gradient, self.generator.trainable_variables))
        return {"d_loss": d_loss, "g_loss": g_loss}


def _fit_wgan_gp(leaky: bool):
    def train(logdir, observer):
        kit.seed(31)
        wgan = WGAN(leaky)
        d_opt = keras.optimizers.Adam(0.002, beta_1=0.5, beta_2=0.9)
        g_opt = keras.optimizers.Adam(0.002, beta_1=0.5, beta_2=0.9)
        wgan.compile(d_opt, g_opt)
        real = kit.batch(0)["s"]
        rng = np.random.default_rng(31)

        def probe():
            z = tf.constant(rng.normal(size=(kit.BATCH, LATENT)), tf.float32)
            alpha = tf.constant(rng.normal(size=(kit.BATCH, 1)), tf.float32)
            return StepProbe(
                [
                    kit.loss_probe(
                        "d_loss",
                        lambda: _taped(lambda: wgan.d_loss(real, z, alpha)),
                        d_opt,
                        wgan.d_variables,
                    ),
                    kit.loss_probe(
                        "g_loss",
                        lambda: _taped(lambda: wgan.g_loss(z)),
                        g_opt,
                        lambda: wgan.generator.trainable_variables,
                    ),
                ],
                kit.variables_of({"wgan": wgan}),
                [d_opt, g_opt],
            )

        callback = GradscopeCallback(logdir, every_n_batches=1, rules=list(WGAN_RULES))
        dataset = tf.data.Dataset.from_tensors(real).repeat(STEPS)
        wgan.fit(dataset, epochs=1, verbose=0, callbacks=[_Watch(observer, probe), callback])
        callback.detach()

    return train


# ----- GAN of functional models, the generator trained through a combined model ------

GAN_RULES = ("never(d_loss, gan/generator)", "only(g_loss, [gan/generator])")


def _bce(logits, label):
    labels = tf.fill(tf.shape(logits), label)
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))


class CombinedGAN(keras.Model):
    def __init__(self, leaky: bool):
        super().__init__(name="gan")
        self.leaky = leaky
        self.generator = _functional("generator", LATENT, [4, kit.OBS])
        self.discriminator = _functional("discriminator", kit.OBS, [4, 1])
        z = keras.Input((LATENT,))
        self.combined = keras.Model(z, self.discriminator(self.generator(z)), name="combined")

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer

    def d_loss(self, real, z):
        fake = self.generator(z)
        return _bce(self.discriminator(real), 1.0) + _bce(self.discriminator(fake), 0.0)

    def g_loss(self, z):
        return _bce(self.combined(z), 1.0)

    def g_variables(self):
        return (
            self.combined.trainable_variables if self.leaky else self.generator.trainable_variables
        )

    def train_step(self, data):
        real, z = data["real"], data["z"]
        with tf.GradientTape() as tape:
            d_loss = self.d_loss(real, z)
        grads = tape.gradient(d_loss, self.discriminator.trainable_variables)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_variables))
        with tf.GradientTape() as tape:
            g_loss = self.g_loss(z)
        grads = tape.gradient(g_loss, self.g_variables())
        self.g_optimizer.apply_gradients(zip(grads, self.g_variables()))
        return {"d_loss": d_loss, "g_loss": g_loss}


def _fit_functional_gan(leaky: bool):
    def train(logdir, observer):
        kit.seed(32)
        gan = CombinedGAN(leaky)
        d_opt, g_opt = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
        gan.compile(d_opt, g_opt)
        b = kit.batch(0)
        data = {"real": b["s"], "z": b["noise"]}

        def probe():
            return StepProbe(
                [
                    kit.loss_probe(
                        "d_loss",
                        lambda: _taped(lambda: gan.d_loss(data["real"], data["z"])),
                        d_opt,
                        lambda: gan.discriminator.trainable_variables,
                    ),
                    kit.loss_probe(
                        "g_loss",
                        lambda: _taped(lambda: gan.g_loss(data["z"])),
                        g_opt,
                        gan.g_variables,
                    ),
                ],
                kit.variables_of({"gan": gan}),
                [d_opt, g_opt],
            )

        callback = GradscopeCallback(logdir, every_n_batches=1, rules=list(GAN_RULES))
        dataset = tf.data.Dataset.from_tensors(data).repeat(STEPS)
        gan.fit(dataset, epochs=1, verbose=0, callbacks=[_Watch(observer, probe), callback])
        callback.detach()

    return train


SHAPES = [
    Shape(
        "fit_wgan_gp",
        KERAS_FIT,
        _fit_wgan_gp(False),
        WGAN_RULES,
        note="Keras fit, WGAN-GP of functional sub-models: 3 critic steps with a nested-tape gradient penalty, "
        "then a generator step, noise drawn in the step",
    ),
    Shape(
        "fit_wgan_gp_leaky",
        KERAS_FIT,
        _fit_wgan_gp(True),
        WGAN_RULES,
        advice=("var_list",),
        mutant_of="fit_wgan_gp",
        note="the critic optimizer's var_list takes the generator's variables",
    ),
    Shape(
        "fit_functional_gan",
        KERAS_FIT,
        _fit_functional_gan(False),
        GAN_RULES,
        note="Keras fit, GAN of functional models, the generator trained through a functional combined model",
    ),
    Shape(
        "fit_functional_gan_leaky",
        KERAS_FIT,
        _fit_functional_gan(True),
        GAN_RULES,
        advice=("var_list",),
        mutant_of="fit_functional_gan",
        note="the generator's loss applied to the combined model's variables",
    ),
]
