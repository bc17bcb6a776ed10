"""Shared pieces of the Keras callback tests: a two-output model, its data, an oracle.

The model has a shared body feeding the `q` head, and an `aux` head on its own
hidden layer, so `q`'s gradient never reaches `aux` (independent) while both
heads train. The oracle recomputes each weighted loss's gradient with a plain
GradientTape on the weights a callback-free run had before the same batch.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf
from tensorboard import context

from tb_gradscope import _naming as naming
from tb_gradscope import format as fmt
from tests.support.providers import EXPERIMENT, python_provider

BATCH, N, EPOCHS = 16, 64, 2
STEPS = EPOCHS * N // BATCH
WEIGHTS = {"q": 1.0, "aux": 0.2}


def two_output_model(jit_compile: bool = False, steps_per_execution: int = 1) -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((4,), name="obs")
    body = keras.layers.Dense(8, activation="relu", name="body")(inputs)
    q = keras.layers.Dense(1, name="q")(body)
    aux_hidden = keras.layers.Dense(4, activation="tanh", name="aux_hidden")(inputs)
    aux = keras.layers.Dense(1, name="aux")(aux_hidden)
    model = keras.Model(inputs, {"q": q, "aux": aux}, name="agent")
    model.compile(
        keras.optimizers.Adam(0.01),
        loss={"q": "mse", "aux": "mse"},
        loss_weights=dict(WEIGHTS),
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )
    return model


def data() -> tuple[np.ndarray, dict[str, np.ndarray]]:
    rs = np.random.RandomState(0)
    x = rs.randn(N, 4).astype("float32")
    y = {"q": rs.randn(N, 1).astype("float32"), "aux": rs.randn(N, 1).astype("float32")}
    return x, y


def fit(model: keras.Model, callbacks: list) -> None:
    x, y = data()
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0, callbacks=callbacks)


class WeightsBeforeEachBatch(keras.callbacks.Callback):
    """Weights at every on_train_batch_begin (every step when steps_per_execution=1)."""

    def __init__(self) -> None:
        super().__init__()
        self.before: list[list[np.ndarray]] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.before.append([w.numpy() for w in self.model.weights])


def reference_weights() -> list[list[np.ndarray]]:
    """The weights before each step of a callback-free (of ours) eager-compiled run."""
    model = two_output_model()
    probe = WeightsBeforeEachBatch()
    fit(model, [probe])
    return probe.before


def manual_norms(step: int, weights: list[np.ndarray]) -> dict[str, dict[str, float]]:
    """{loss: {scope: L2 of tape.gradient(weight * mse, variables) in that scope}}."""
    model = two_output_model()
    model.set_weights(weights)
    x, y = data()
    start = (step % (N // BATCH)) * BATCH
    xb = x[start : start + BATCH]
    named = naming.model_variables(model.name, model)
    out = {}
    for loss, weight in WEIGHTS.items():
        with tf.GradientTape() as tape:
            pred = model(xb, training=True)[loss]
            value = weight * tf.reduce_mean(tf.square(y[loss][start : start + BATCH] - pred))
        grads = tape.gradient(value, [v for v, _ in named])
        sumsq: dict[str, float] = {}
        for (_, name), g in zip(named, grads):
            parts = name.split("/")
            for depth in range(1, len(parts)):
                scope = "/".join(parts[:depth])
                sq = 0.0 if g is None else float(np.sum(np.square(g.numpy(), dtype=np.float64)))
                sumsq[scope] = sumsq.get(scope, 0.0) + sq
        out[loss] = {scope: float(np.sqrt(s)) for scope, s in sumsq.items()}
    return out


def record_infos(logdir: str) -> dict[tuple[str, str], fmt.RecordInfo]:
    """{(kind, name): RecordInfo} of the one run under `logdir`."""
    provider = python_provider(logdir, {fmt.PLUGIN_NAME: 0})
    listed = provider.list_tensors(
        context.RequestContext(), experiment_id=EXPERIMENT, plugin_name=fmt.PLUGIN_NAME
    )
    infos = {}
    for tags in listed.values():
        for series in tags.values():
            info = fmt.parse_plugin_content(series.plugin_content)
            infos[(info.kind.value, info.name)] = info
    return infos
