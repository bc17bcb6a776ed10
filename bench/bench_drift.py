"""Overhead of drift recording on a DQN-sized training loop.

Baseline: the same loop (Adam step on the online MLP + EMA target update, one
`tf.function` per step) without a DriftMonitor, run side by side with the same
loop recording every 10 steps, and every step, interleaved. Headline: loop time
with recording every 10 steps / loop time without.
"""

from __future__ import annotations

import tempfile

import keras
import numpy as np
import tensorflow as tf

from bench import harness
from tb_gradscope.pairs import DriftMonitor, pair_models

TAU = 0.005
HIDDEN = 256


def _mlp(name: str) -> keras.Model:
    return keras.Sequential(
        [keras.Input((32,)), keras.layers.Dense(HIDDEN, activation="relu"),
         keras.layers.Dense(HIDDEN, activation="relu"), keras.layers.Dense(8)],
        name=name,
    )


def _loop(logdir: str | None, every_n_steps: int, steps: int):
    """A callable running `steps` training steps (monitor recording if logdir)."""
    online, target = _mlp("online"), _mlp("target")
    for t, o in zip(target.weights, online.weights):
        t.assign(o)
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(online.trainable_weights)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(64, 32)), tf.float32)
    y = tf.constant(rng.normal(size=(64, 8)), tf.float32)
    monitor = None
    if logdir is not None:
        monitor = DriftMonitor([pair_models(target, online)], logdir=logdir,
                               every_n_steps=every_n_steps)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(online(x) - tf.stop_gradient(target(x)) - y))
        grads = tape.gradient(loss, online.trainable_weights)
        optimizer.apply_gradients(zip(grads, online.trainable_weights))
        for t, o in zip(target.weights, online.weights):
            t.assign((1.0 - TAU) * t + TAU * o)
        if monitor is not None:
            monitor.record()

    step()  # trace outside the timing

    def run():
        for _ in range(steps):
            step()
        if monitor is not None:
            monitor.flush()

    return run, sum(int(np.prod(v.shape)) for v in online.weights)


def main() -> None:
    args = harness.parse_args(__doc__)
    steps, repetitions = (50, 7) if args.quick else (200, 21)
    with tempfile.TemporaryDirectory() as root:
        baseline, params = _loop(None, 10, steps)
        every10, _ = _loop(f"{root}/every10", 10, steps)
        every1, _ = _loop(f"{root}/every1", 1, steps)
        medians = harness.interleaved_medians(
            {"baseline": baseline, "every10": every10, "every1": every1}, repetitions
        )
    harness.report("online_parameters", params)
    harness.report("steps_per_repetition", steps)
    harness.report("baseline_step_seconds", medians["baseline"] / steps)
    harness.report("every1_step_seconds", medians["every1"] / steps)
    harness.report("drift_every_step_overhead_ratio", medians["every1"] / medians["baseline"])
    harness.report("drift_every_10_steps_overhead_ratio", medians["every10"] / medians["baseline"])


if __name__ == "__main__":
    main()
