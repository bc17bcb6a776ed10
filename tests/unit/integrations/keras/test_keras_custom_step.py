"""Keras `fit` with a custom two-optimizer `train_step` (a GAN), recorded by the
callback with no other change to the user's code."""

from __future__ import annotations

import io

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.commands import build_parser
from tb_gradscope.integrations.keras import GradscopeCallback
from tb_gradscope.integrations.keras import _custom as custom
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.summary import run_summary

LATENT, BATCHES, EVERY = 4, 24, 5


class GAN(keras.Model):
    """The Keras GAN example's shape: fakes generated before the discriminator's
    tape, two optimizers, losses reported through Mean metrics."""

    def __init__(self, discriminator, generator):
        super().__init__(name="gan")
        self.discriminator, self.generator = discriminator, generator
        self.d_loss_metric = keras.metrics.Mean(name="d_loss")
        self.g_loss_metric = keras.metrics.Mean(name="g_loss")

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer, self.g_optimizer, self.loss_fn = d_optimizer, g_optimizer, loss_fn

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real):
        batch = tf.shape(real)[0]
        fake = self.generator(tf.random.normal((batch, LATENT), seed=1))
        combined = tf.concat([fake, real], 0)
        labels = tf.concat([tf.ones((batch, 1)), tf.zeros((batch, 1))], 0)
        with tf.GradientTape() as tape:
            d_loss = self.loss_fn(labels, self.discriminator(combined))
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        with tf.GradientTape() as tape:
            g_loss = self.loss_fn(
                tf.zeros((batch, 1)),
                self.discriminator(self.generator(tf.random.normal((batch, LATENT), seed=2))),
            )
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


@pytest.fixture(scope="module")
def gan_run(tmp_path_factory):
    keras.utils.set_random_seed(0)
    discriminator = keras.Sequential(
        [keras.Input((3,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(1)],
        name="discriminator",
    )
    generator = keras.Sequential(
        [keras.Input((LATENT,)), keras.layers.Dense(4, activation="relu"), keras.layers.Dense(3)],
        name="generator",
    )
    gan = GAN(discriminator, generator)
    gan.compile(
        keras.optimizers.Adam(1e-3),
        keras.optimizers.Adam(1e-3),
        keras.losses.BinaryCrossentropy(from_logits=True),
    )
    logdir = str(tmp_path_factory.mktemp("gan"))
    callback = GradscopeCallback(
        logdir,
        every_n_batches=EVERY,
        rules=["never(d_loss, gan/generator/*)", "only(g_loss, [gan/generator])"],
    )
    data = np.random.default_rng(0).normal(size=(BATCHES * 8, 3)).astype("float32")
    gan.fit(data, batch_size=8, epochs=1, verbose=0, callbacks=[callback])
    (logs,) = load_logdir(logdir)
    return logs, callback


def test_steps_are_counted_per_batch_whatever_model_optimizer_is(gan_run):
    logs, _ = gan_run
    assert sorted(logs.grads) == list(range(0, BATCHES, EVERY))
    assert sorted(logs.updates) == list(range(0, BATCHES, EVERY))


def test_both_losses_attributed_at_every_recorded_step(gan_run):
    logs, _ = gan_run
    for step, tables in logs.grads.items():
        assert sorted(tables) == ["d_loss", "g_loss"], step


def test_each_loss_updates_its_own_network(gan_run):
    logs, _ = gan_run
    cells = run_summary(logs, step=EVERY)["cells"]
    assert cells["d_loss"]["gan/discriminator"]["state"] == fmt.UPDATES
    assert cells["g_loss"]["gan/generator"]["state"] == fmt.UPDATES
    assert cells["g_loss"]["gan/discriminator"]["state"] == fmt.IGNORED
    # The fakes were generated before the discriminator's tape opened.
    assert cells["d_loss"]["gan/generator"]["state"] == fmt.BLOCKED
    updates = logs.updates[EVERY]
    assert updates.row("gan/discriminator")["update_norm"] > 0
    assert updates.row("gan/generator")["update_norm"] > 0


def test_correct_gan_breaks_no_rule(gan_run):
    _, callback = gan_run
    args = build_parser().parse_args(["check", callback.logdir])
    out, err = io.StringIO(), io.StringIO()
    assert args.run(args, out, err) == 0, out.getvalue() + err.getvalue()


def test_gradient_calls_from_one_place_are_one_loss_taken_at_its_first_call():
    """A loop of critic steps differentiates one loss three times; a helper
    called from two lines differentiates two losses."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    x = tf.ones([1, 2])

    def minimize(loss_fn):
        with tf.GradientTape() as tape:
            loss = loss_fn()
        tape.gradient(loss, model.trainable_variables)
        return loss

    with custom.observe(model) as seen:
        for _ in range(3):
            with tf.GradientTape() as tape:
                critic = tf.reduce_sum(model(x))
            tape.gradient(critic, model.trainable_variables)
        minimize(lambda: tf.reduce_sum(model(x)))
        second = minimize(lambda: tf.reduce_mean(model(x)))
    named = seen.named({"critic": critic, "second": second})
    assert len(seen.taped) == 5
    assert list(named) == ["critic", "loss_1", "second"]
    assert named["critic"] is seen.taped[0]
    assert named["second"] is seen.taped[4]
