"""Losses added with `add_loss` under `fit`: each term is a loss of its own.

A vector-quantizer layer adds its codebook and commitment losses with
`add_loss` (issue 57 item 5): the codebook loss trains the codebook (the
encoder's output behind `stop_gradient`), the commitment loss the encoder
(the codebook behind `stop_gradient`). Under `fit` with the callback each term
gets rows named after its layer and the name its code holds it under
(`vq/codebook_loss`), beside the compiled output loss.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.integrations.keras import GradscopeCallback
from tests.support.tf1_support import read_records

pytestmark = pytest.mark.slow


class VectorQuantizer(keras.layers.Layer):
    """The nearest of `codes` codebook vectors, with a straight-through gradient."""

    def __init__(self, codes: int, dim: int, beta: float = 0.25, **kwargs):
        super().__init__(**kwargs)
        self.beta = beta
        self.codebook = self.add_weight(shape=(codes, dim), name="codebook")

    def call(self, z):
        distances = tf.reduce_sum(tf.square(z[:, None, :] - self.codebook[None]), axis=-1)
        quantized = tf.gather(self.codebook, tf.argmin(distances, axis=1))
        codebook_loss = tf.reduce_mean(tf.square(tf.stop_gradient(z) - quantized))
        commitment_loss = self.beta * tf.reduce_mean(tf.square(z - tf.stop_gradient(quantized)))
        self.add_loss(codebook_loss)
        self.add_loss(commitment_loss)
        return z + tf.stop_gradient(quantized - z)


def _vq_model() -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    z = keras.layers.Dense(3, name="encoder")(inputs)
    q = VectorQuantizer(4, 3, name="vq")(z)
    out = keras.layers.Dense(6, name="decoder")(q)
    model = keras.Model(inputs, out, name="vqvae")
    model.compile(keras.optimizers.Adam(1e-2), loss="mse")
    return model


def test_each_add_loss_term_has_rows_named_after_its_layer_and_code(tmp_path):
    model = _vq_model()
    x = np.random.default_rng(0).normal(size=(32, 6)).astype("float32")
    callback = GradscopeCallback(str(tmp_path), every_n_batches=2)
    model.fit(x, x, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    records = read_records(str(tmp_path))
    names = sorted(name for kind, name in records if kind == "grad_stats")
    assert names == ["decoder", "vq/codebook_loss", "vq/commitment_loss"], names
    table = records[("grad_stats", "vq/codebook_loss")][0].value
    assert table.row("vqvae/vq")["grad_vars"] == 1  # the codebook
    assert table.row("vqvae/encoder")["grad_vars"] == 0  # behind stop_gradient
    table = records[("grad_stats", "vq/commitment_loss")][0].value
    assert table.row("vqvae/encoder")["grad_vars"] == 2 and table.row("vqvae/encoder")["l2"] > 0
    assert table.row("vqvae/vq")["grad_vars"] == 0  # behind stop_gradient


def test_an_add_loss_terms_gradient_is_the_terms_own(tmp_path):
    """The commitment loss's recorded ‖g‖ on the encoder at step 0 is that of
    the term alone, recomputed with a plain tape on the first batch."""
    x = np.random.default_rng(0).normal(size=(32, 6)).astype("float32")
    fresh = _vq_model()
    with tf.GradientTape() as tape:
        fresh(x[:8], training=True)
        commitment = fresh.get_layer("vq").losses[1]
    encoder = fresh.get_layer("encoder").trainable_variables
    want = float(tf.linalg.global_norm(tape.gradient(commitment, encoder)))
    model = _vq_model()
    callback = GradscopeCallback(str(tmp_path), every_n_batches=2)
    model.fit(x, x, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    (first, *_) = read_records(str(tmp_path))[("grad_stats", "vq/commitment_loss")]
    assert first.step == 0
    assert first.value.row("vqvae/encoder")["l2"] == pytest.approx(want, rel=1e-5)


class _OwnStep(keras.Model):
    """A custom train_step: its own tape over the compiled loss plus the added terms."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            recon_loss = tf.reduce_mean(tf.square(self(x, training=True) - y))
            total = recon_loss + tf.add_n(self.losses)
        grads = tape.gradient(total, self.trainable_variables)
        self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
        return {"loss": total}


def test_a_custom_train_steps_own_loss_keeps_its_row_beside_the_add_loss_terms(tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    z = keras.layers.Dense(3, name="encoder")(inputs)
    out = keras.layers.Dense(6, name="decoder")(VectorQuantizer(4, 3, name="vq")(z))
    model = _OwnStep(inputs, out, name="vqvae")
    model.compile(keras.optimizers.Adam(1e-2))
    x = np.random.default_rng(0).normal(size=(16, 6)).astype("float32")
    callback = GradscopeCallback(str(tmp_path), every_n_batches=1)
    model.fit(x, x, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    names = sorted(n for kind, n in read_records(str(tmp_path)) if kind == "grad_stats")
    assert names == ["loss", "vq/codebook_loss", "vq/commitment_loss"], names  # as its logs name it


def test_recording_the_add_loss_terms_trains_bitwise_as_without_the_callback(tmp_path):
    x = np.random.default_rng(0).normal(size=(32, 6)).astype("float32")
    weights = []
    for callbacks in ([], [GradscopeCallback(str(tmp_path), every_n_batches=1)]):
        model = _vq_model()
        model.fit(x, x, batch_size=8, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)
        weights.append([w.numpy() for w in model.weights])
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
