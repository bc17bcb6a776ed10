"""The Keras callback on code it had not met (issue 57): a per-sample loss in a
custom `train_step`, variables Keras does not track, and `variables=`."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.integrations.keras import GradscopeCallback
from tb_gradscope.read.logdir import load_logdir


def _net(name: str) -> keras.Model:
    x = keras.Input((3,))
    return keras.Model(x, keras.layers.Dense(1, name="out")(x), name=name)


class PerSample(keras.Model):
    """A custom step differentiating a per-sample loss vector (shape [batch])."""

    def __init__(self):
        super().__init__(name="ps")
        self.net = _net("net")

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            per_sample = tf.reduce_sum((self.net(x) - y) ** 2, axis=1)
        grads = tape.gradient(per_sample, self.net.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.net.trainable_variables))
        return {"loss": tf.reduce_mean(per_sample)}


def test_a_per_sample_loss_records_the_gradient_of_its_sum_and_says_so(tmp_path):
    keras.utils.set_random_seed(0)
    model = PerSample()
    model.compile(keras.optimizers.SGD(0.0))  # weights stay put: the gradient is checkable
    x = np.random.default_rng(0).normal(size=(8, 3)).astype("float32")
    y = np.ones((8, 1), "float32")
    with pytest.warns(UserWarning, match=r"not a scalar.*sum.*tape\.gradient"):
        model.fit(
            x,
            y,
            batch_size=8,
            epochs=2,
            verbose=0,
            callbacks=[GradscopeCallback(str(tmp_path), every_n_batches=1)],
        )
    (logs,) = load_logdir(str(tmp_path))
    (name,) = logs.grads[0]
    with tf.GradientTape() as tape:
        total = tf.reduce_sum((model.net(x) - y) ** 2)
    want = np.sqrt(sum(float(tf.reduce_sum(g**2)) for g in tape.gradient(total, model.net.weights)))
    assert logs.grads[0][name].row("ps/net")["l2"] == pytest.approx(want, rel=1e-4)


class Scaled(keras.layers.Layer):
    """A Keras 3 layer holding a raw tf.Variable, which Keras does not track."""

    def __init__(self):
        super().__init__(name="scaled")
        self.scale = tf.Variable(2.0, name="scale")

    def call(self, x):
        return self.scale * x


def _scaled_model() -> keras.Model:
    x = keras.Input((3,))
    h = keras.layers.Dense(1, name="out")(x)
    return keras.Model(x, Scaled()(h), name="m")


def test_a_variable_keras_does_not_track_is_reported(tmp_path):
    keras.utils.set_random_seed(0)
    model = _scaled_model()
    model.compile(keras.optimizers.SGD(0.1), loss="mse")
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    with pytest.warns(UserWarning, match=r"layer 'scaled'.*'scale'.*does not track.*variables="):
        model.fit(
            x,
            y,
            batch_size=8,
            epochs=1,
            verbose=0,
            callbacks=[GradscopeCallback(str(tmp_path), every_n_batches=1)],
        )


def test_variables_records_a_variable_keras_does_not_track(tmp_path):
    keras.utils.set_random_seed(0)
    model = _scaled_model()
    model.compile(keras.optimizers.SGD(0.1), loss="mse")
    scale = model.get_layer("scaled").scale
    x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    callback = GradscopeCallback(str(tmp_path), every_n_batches=1, variables=[scale])
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, callbacks=[callback])
    (logs,) = load_logdir(str(tmp_path))
    (table,) = logs.grads[0].values()
    assert "m/scaled" in table.info.scopes
    assert table.row("m/scaled")["grad_vars"] == 1  # the gradient reaches it
    assert logs.updates[0].row("m/scaled")["update_norm"] == 0.0  # and fit never applies it
