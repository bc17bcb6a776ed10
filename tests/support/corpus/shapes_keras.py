"""Keras `fit` shapes, recorded by the GradscopeCallback.

- fit_multi_output: a two-output model compiled with a weighted loss per
  output, the auxiliary head reading the trunk behind stop_gradient; mutant:
  without it.
- fit_gan: a GAN subclassing keras.Model with its own two-optimizer
  `train_step` (`compile()` gives Keras no optimizer); mutant: the generator's
  optimizer over both networks.

One batch per epoch, the same batch every time, so the oracle's probe (taken
in `on_train_batch_begin`) sees exactly the step's inputs.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tb_gradscope.integrations.keras import GradscopeCallback
from tests.support.corpus import kit
from tests.support.corpus.spec import KERAS_FIT, Forward, Shape, StepProbe

STEPS = 4


class _Watch(keras.callbacks.Callback):
    """Calls the observer around every batch (the probe built by `probe()`)."""

    def __init__(self, observer, probe):
        super().__init__()
        self._observer, self._probe, self._step = observer, probe, 0

    def on_train_batch_begin(self, batch, logs=None):
        self._observer.before(self._step, self._probe())

    def on_train_batch_end(self, batch, logs=None):
        self._observer.after(self._step)
        self._step += 1


# ----- two outputs, compiled losses ----------------------------------------------------

MULTI_RULES = ("never(aux, agent/trunk)", "only(aux, [agent/aux])")
WEIGHTS = {"q": 1.0, "aux": 0.5}


def _multi_output(leaky: bool):
    def train(logdir, observer):
        kit.seed(19)
        x = keras.Input((kit.OBS,))
        h = keras.layers.Dense(4, activation="tanh", name="trunk")(x)
        outputs = {
            "q": keras.layers.Dense(1, name="q")(h),
            "aux": keras.layers.Dense(1, name="aux")(h if leaky else keras.ops.stop_gradient(h)),
        }
        model = keras.Model(x, outputs, name="agent")
        model.compile(
            keras.optimizers.SGD(0.05), loss={"q": "mse", "aux": "mse"}, loss_weights=WEIGHTS
        )
        b = kit.batch(0)
        ys = {"q": b["y"], "aux": b["r"][:, None]}

        def forward(name):
            with tf.GradientTape() as tape:
                out = model(b["s"], training=True)
                loss = WEIGHTS[name] * tf.reduce_mean(tf.square(out[name] - ys[name]))
            return Forward(tape, loss)

        def probe():
            return StepProbe(
                [
                    kit.loss_probe(
                        n,
                        lambda n=n: forward(n),
                        model.optimizer,
                        lambda: model.trainable_variables,
                    )
                    for n in ("q", "aux")
                ],
                kit.variables_of({"agent": model}),
                [model.optimizer],
            )

        callback = GradscopeCallback(logdir, every_n_batches=1, rules=list(MULTI_RULES))
        model.fit(
            b["s"],
            ys,
            batch_size=kit.BATCH,
            epochs=STEPS,
            shuffle=False,
            verbose=0,
            callbacks=[_Watch(observer, probe), callback],
        )
        callback.detach()

    return train


# ----- GAN with a custom two-optimizer train_step ---------------------------------------

GAN_RULES = ("never(d_loss, gan/generator/*)", "only(g_loss, [gan/generator])")


def _bce(logits, label):
    labels = tf.fill(tf.shape(logits), label)
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=labels, logits=logits))


class GAN(keras.Model):
    """Discriminator step then generator step, each with its own optimizer."""

    def __init__(self, leaky: bool):
        super().__init__(name="gan")
        self.leaky = leaky
        self.generator = kit.mlp("generator", [4, kit.OBS], inputs=2)
        self.discriminator = kit.mlp("discriminator", [4, 1])

    def compile(self, d_optimizer, g_optimizer):
        super().compile()
        self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer

    def d_loss(self, real, noise):
        fake = self.generator(noise)
        return _bce(self.discriminator(real), 1.0) + _bce(self.discriminator(fake), 0.0)

    def g_loss(self, noise):
        return _bce(self.discriminator(self.generator(noise)), 1.0)

    def g_variables(self):
        return self.generator.trainable_weights + (
            self.discriminator.trainable_weights if self.leaky else []
        )

    def train_step(self, data):
        real, noise = data["real"], data["noise"]
        with tf.GradientTape() as tape:
            d_loss = self.d_loss(real, noise)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        with tf.GradientTape() as tape:
            g_loss = self.g_loss(noise)
        grads = tape.gradient(g_loss, self.g_variables())
        self.g_optimizer.apply_gradients(zip(grads, self.g_variables()))
        return {"d_loss": d_loss, "g_loss": g_loss}


def _fit_gan(leaky: bool):
    def train(logdir, observer):
        kit.seed(20)
        gan = GAN(leaky)
        d_opt, g_opt = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
        gan.compile(d_opt, g_opt)
        b = kit.batch(0)
        data = {"real": b["s"], "noise": b["noise"]}

        def probe():
            def d_forward():
                return _taped(lambda: gan.d_loss(data["real"], data["noise"]))

            def g_forward():
                return _taped(lambda: gan.g_loss(data["noise"]))

            return StepProbe(
                [
                    kit.loss_probe(
                        "d_loss", d_forward, d_opt, lambda: gan.discriminator.trainable_weights
                    ),
                    kit.loss_probe("g_loss", g_forward, g_opt, gan.g_variables),
                ],
                kit.variables_of({"gan": gan}),
                [d_opt, g_opt],
            )

        callback = GradscopeCallback(logdir, every_n_batches=1, rules=list(GAN_RULES))
        dataset = tf.data.Dataset.from_tensors(data).repeat(STEPS)
        gan.fit(dataset, epochs=1, verbose=0, callbacks=[_Watch(observer, probe), callback])
        callback.detach()

    return train


def _taped(fn) -> Forward:
    with tf.GradientTape() as tape:
        value = fn()
    return Forward(tape, value)


SHAPES = [
    Shape(
        "fit_multi_output",
        KERAS_FIT,
        _multi_output(False),
        MULTI_RULES,
        note="Keras fit, two outputs with weighted compiled losses, aux head behind stop_gradient",
    ),
    Shape(
        "fit_multi_output_leaky",
        KERAS_FIT,
        _multi_output(True),
        MULTI_RULES,
        advice=("stop_gradient",),
        mutant_of="fit_multi_output",
        note="aux head without stop_gradient",
    ),
    Shape(
        "fit_gan",
        KERAS_FIT,
        _fit_gan(False),
        GAN_RULES,
        note="Keras fit, GAN with a custom train_step and two optimizers",
    ),
    Shape(
        "fit_gan_leaky",
        KERAS_FIT,
        _fit_gan(True),
        GAN_RULES,
        advice=("var_list",),
        mutant_of="fit_gan",
        note="the generator's optimizer over both networks",
    ),
]
