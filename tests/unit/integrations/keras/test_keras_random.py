"""The callback only observes a step that draws random numbers: weights bitwise those without it.

A custom `train_step` adds noise to its inputs, drawn five ways: `tf.random.normal`
seeded by the global seed only, and with an op seed (both keep their random state
in the op's kernel), a `tf.random.Generator`, `keras.random` with a
`SeedGenerator`, and a stateless draw seeded from the step. A functional model
with a `tf.random.normal` layer and Keras's `Dropout` covers compiled losses.
`every_n_batches=3` makes the callback's recorded and plain functions take turns;
`every_n_batches=1` runs the recorded one only. Determinism is process-wide, so
the fits run in a child process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))
DRAWS = ("global_seed", "op_seed", "generator", "keras_seed_generator", "stateless")
FUNCTIONAL = ("functional_tf_random", "functional_dropout")

CHILD = textwrap.dedent(
    """
    import json, tempfile, warnings
    import numpy as np
    import tensorflow as tf
    tf.config.experimental.enable_op_determinism()
    import keras
    from tb_gradscope.integrations.keras import GradscopeCallback

    class Noisy(keras.Model):
        def __init__(self, draw):
            super().__init__(name="noisy")
            self.draw = draw
            self.net = keras.Sequential(
                [keras.Input((3,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(1)], name="net")
            if draw == "generator":
                self.rng = tf.random.Generator.from_seed(5)
            if draw == "keras_seed_generator":
                self.seeds = keras.random.SeedGenerator(5)

        def noise(self, shape):
            if self.draw == "global_seed":
                return tf.random.normal(shape)
            if self.draw == "op_seed":
                return tf.random.normal(shape, seed=7)
            if self.draw == "generator":
                return self.rng.normal(shape)
            if self.draw == "keras_seed_generator":
                return keras.random.normal(shape, seed=self.seeds)
            step = tf.cast(self.optimizer.iterations, tf.int32)
            return tf.random.stateless_normal(shape, seed=tf.stack([step, 3]))

        def train_step(self, data):
            x, y = data
            x = x + 0.1 * self.noise(tf.shape(x))
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(self.net(x) - y))
            grads = tape.gradient(loss, self.net.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.net.trainable_weights))
            return {"loss": loss}

    class TFNoise(keras.layers.Layer):
        def call(self, x, training=None):
            return x + 0.1 * tf.random.normal(tf.shape(x)) if training else x

    def model_for(draw):
        if draw.startswith("functional"):
            inputs = keras.Input((3,))
            h = TFNoise()(inputs) if draw == "functional_tf_random" else inputs
            h = keras.layers.Dense(4, activation="tanh")(h)
            if draw == "functional_dropout":
                h = keras.layers.Dropout(0.3)(h)
            model = keras.Model(inputs, keras.layers.Dense(1)(h), name="f")
            model.compile(keras.optimizers.Adam(0.01), loss="mse")
            return model
        model = Noisy(draw)
        model.compile(keras.optimizers.Adam(0.01))
        return model

    def weights(draw, every):
        keras.utils.set_random_seed(0)
        model = model_for(draw)
        rs = np.random.RandomState(0)
        x, y = rs.randn(64, 3).astype("float32"), rs.randn(64, 1).astype("float32")
        callback = GradscopeCallback(tempfile.mkdtemp(), every_n_batches=every) if every else None
        fit = lambda: model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0,
                                callbacks=[callback] if callback else [])
        fit()
        fit()  # a second fit continues each draw's sequence
        recording = callback is None or (not callback.disabled and bool(callback.probe.captured))
        return [w.tobytes() for w in model.get_weights()], recording

    out = {}
    for draw in %r:
        plain, _ = weights(draw, 0)
        for every in (1, 3):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                observed, recording = weights(draw, every)
            out[f"{draw}/{every}"] = {
                "identical": observed == plain,
                "recording": recording,
                "gradscope_warnings": [str(w.message) for w in caught if "Gradscope" in str(w.message)],
            }
    print("RESULT" + json.dumps(out))
    """
) % (DRAWS + FUNCTIONAL,)


@pytest.fixture(scope="module")
def results() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT") :])


@pytest.mark.parametrize("every", [1, 3])
@pytest.mark.parametrize("draw", DRAWS + FUNCTIONAL)
def test_random_draws_in_the_step_are_untouched_by_the_callback(results, draw, every):
    result = results[f"{draw}/{every}"]
    assert result["recording"], result
    assert result["gradscope_warnings"] == []
    assert result["identical"], (
        f"{draw}: weights differ with the callback (every_n_batches={every})"
    )
