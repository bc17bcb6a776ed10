"""Tiny target/online trainings for the pair tests, and reading their DRIFT back.

Every scenario trains a real Keras model with a real optimizer inside one
`tf.function`, lets the user-side target update do what the scenario says
(EMA, hard copy, the wrong direction, ...), records with a `DriftMonitor`
into a real event file, and reads it back through TensorBoard's data provider.
Step 0 is recorded before training (the initial state); step i after the i-th
training step and its target update.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
from tensorboard import context as tb_context

from tb_gradscope import format as fmt
from tb_gradscope.record import DriftMonitor
from tests.support import providers

TargetUpdate = Callable[[Any, Any, tf.Tensor], None]


def mlp(name: str, batchnorm: bool = False, seed: int = 0) -> keras.Model:
    """A small Dense net (optionally with BatchNorm) with deterministic init."""
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((6,)), keras.layers.Dense(16, activation="tanh")]
    if batchnorm:
        layers.append(keras.layers.BatchNormalization(momentum=0.9))
    layers += [keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)]
    return keras.Sequential(layers, name=name)


def sync(target: keras.Model, online: keras.Model) -> None:
    for t, o in zip(target.weights, online.weights):
        t.assign(o)


def ema_update(tau: float, weights: str = "weights") -> TargetUpdate:
    """target <- (1 - tau) target + tau online over `weights` of both models."""

    def update(target, online, step):
        for t, o in zip(getattr(target, weights), getattr(online, weights)):
            t.assign((1.0 - tau) * t + tau * o)

    return update


def hard_copy(every: int, reverse: bool = False, until: int | None = None) -> TargetUpdate:
    """target <- online every `every` steps (online <- target with `reverse`).

    With `until`, copies stop after that step (a target that stops following).
    """

    def update(target, online, step):
        def copy():
            src, dst = (target, online) if reverse else (online, target)
            for d, s in zip(dst.weights, src.weights):
                d.assign(s)
            return tf.constant(True)

        due = tf.equal(step % every, 0)
        if until is not None:
            due = tf.logical_and(due, step <= until)
        tf.cond(due, copy, lambda: tf.constant(False))

    return update


@dataclasses.dataclass
class Run:
    """A finished scenario: its logdir, models and monitor."""

    logdir: str
    target: keras.Model
    online: keras.Model
    monitor: DriftMonitor
    traces: int


def train(
    logdir: str,
    target: keras.Model,
    online: keras.Model,
    pairs_of: Callable[[keras.Model, keras.Model], Sequence[Any]],
    update: TargetUpdate,
    steps: int = 200,
    every_n_steps: int = 10,
    optimizer_vars: str = "online",
    monitor_optimizer: bool = True,
    lr: float = 3e-3,
    update_first: bool = False,
) -> Run:
    """Trains `online` on a fixed regression task and records the pairs.

    The target update runs after the optimizer step, or before it with
    `update_first` (DQN code that syncs at the top of `learn()`).
    """
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(64, 6)), tf.float32)
    y = tf.constant(rng.normal(size=(64, 3)), tf.float32)
    x_next = tf.constant(rng.normal(size=(64, 6)), tf.float32)
    optimizer = keras.optimizers.Adam(lr)
    pairs = pairs_of(target, online)
    monitor = DriftMonitor(
        pairs,
        logdir=logdir,
        every_n_steps=every_n_steps,
        optimizers=[optimizer] if monitor_optimizer else [],
    )
    variables = online.trainable_weights
    if optimizer_vars == "both":
        variables = online.trainable_weights + target.trainable_weights
    optimizer.build(variables)  # slots exist before tracing: one trace

    @tf.function
    def step_fn():
        step = monitor.step.read_value()
        if update_first:
            update(target, online, step)
        with tf.GradientTape() as tape:
            label = y
            if optimizer_vars == "both":  # seed 01's leak: a TD target without stop_gradient
                label = y + 0.9 * target(x_next, training=True)
            loss = tf.reduce_mean(tf.square(online(x, training=True) - label))
        grads = tape.gradient(loss, variables)
        optimizer.apply_gradients(zip(grads, variables))
        if not update_first:
            update(target, online, step)
        monitor.record()

    monitor.record()  # step 0: the initial state
    for _ in range(steps):
        step_fn()
    monitor.flush()
    return Run(logdir, target, online, monitor, step_fn.experimental_get_tracing_count())


@dataclasses.dataclass
class DriftRecord:
    """One pair's DRIFT series as read through TensorBoard."""

    info: fmt.RecordInfo
    steps: list[int]
    tables: list[fmt.Table]

    def column(self, scope: str, name: str) -> np.ndarray:
        return np.asarray([t.row(scope)[name] for t in self.tables])


def read_drift(logdir: str, data_provider: Any = None) -> dict[str, DriftRecord]:
    """Every DRIFT record of the logdir's runs, by pair name.

    Reads through `data_provider` (default: the Python multiplexer backend).
    """
    if data_provider is None:
        data_provider = providers.python_provider(logdir, {fmt.PLUGIN_NAME: 100000})
    ctx = tb_context.RequestContext()
    listing = data_provider.list_tensors(ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME)
    series = data_provider.read_tensors(
        ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME, downsample=100000
    )
    out = {}
    for run, tags in listing.items():
        for tag, meta in tags.items():
            info = fmt.parse_plugin_content(meta.plugin_content)
            if info.kind != fmt.Kind.DRIFT:
                continue
            data = sorted(series[run][tag], key=lambda d: d.step)
            out[info.name] = DriftRecord(
                info, [d.step for d in data], [fmt.decode_table(info, d.numpy) for d in data]
            )
    return out
