"""Drift recording overhead: a target-network training loop with a DriftMonitor against the same loop without.

Two loops, each one `tf.function` step (Adam on the online net + EMA target
update): `dqn_mlp` (32-256-256-8, batch 64, the size of a DQN for
low-dimensional states) and `mlp1m` (512-1024-512-10, ~1M parameters, batch
256). For each, the baseline and the same loop with a DriftMonitor recording
every 10 steps and every step run round-robin (order rotated every round) in
one process; ratios are medians recorded / baseline, in wall time and in
process CPU time. As in bench_recording, TF runs on one thread and the
headline ratios are CPU-time ratios: on a shared machine other processes
inflate wall time at random.

    python -m bench.bench_drift --quick   # < 60 s
    python -m bench.bench_drift           # full

Headline (last line): drift_every_10_steps_cpu_ratio on dqn_mlp.
"""

from __future__ import annotations

import tempfile

import keras
import numpy as np
import tensorflow as tf

from bench import harness, tf_steps
from tb_gradscope.pairs import pair_models
from tb_gradscope.record import DriftMonitor

TAU = 0.005
SHAPES = {"dqn_mlp": ((32, 256, 256, 8), 64), "mlp1m": ((512, 1024, 512, 10), 256)}


def _mlp(name: str, sizes: tuple[int, ...]) -> keras.Model:
    layers = [keras.Input((sizes[0],))]
    layers += [keras.layers.Dense(n, activation="relu") for n in sizes[1:-1]]
    return keras.Sequential(layers + [keras.layers.Dense(sizes[-1])], name=name)


def _loop(sizes: tuple[int, ...], batch: int, logdir: str | None, every: int, steps: int):
    """A callable running `steps` training steps (recording drift if logdir)."""
    online, target = _mlp("online", sizes), _mlp("target", sizes)
    for t, o in zip(target.weights, online.weights):
        t.assign(o)
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(online.trainable_weights)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(batch, sizes[0])), tf.float32)
    y = tf.constant(rng.normal(size=(batch, sizes[-1])), tf.float32)
    monitor = None
    if logdir is not None:
        monitor = DriftMonitor([pair_models(target, online)], logdir=logdir, every_n_steps=every)

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
        return loss

    def run():
        for _ in range(steps):
            loss = step()
        loss.numpy()
        if monitor is not None:
            monitor.flush()

    run()  # trace and warm up outside the timing
    return run, sum(int(np.prod(v.shape)) for v in online.weights)


def _measure(prefix: str, steps: int, repetitions: int, root: str) -> dict[str, float]:
    sizes, batch = SHAPES[prefix]
    baseline, params = _loop(sizes, batch, None, 10, steps)
    runs = {
        "baseline": baseline,
        "every10": _loop(sizes, batch, f"{root}/{prefix}_10", 10, steps)[0],
        "every1": _loop(sizes, batch, f"{root}/{prefix}_1", 1, steps)[0],
    }
    wall, cpu = harness.rotated_medians(runs, repetitions)
    harness.report(f"{prefix}_params", params)
    harness.report(f"{prefix}_baseline_ms_per_step", 1000 * wall["baseline"] / steps)
    harness.report(f"{prefix}_every1_ms_per_step", 1000 * wall["every1"] / steps)
    for label in ("every1", "every10"):
        harness.report(f"{prefix}_{label}_wall_ratio", wall[label] / wall["baseline"])
        harness.report(f"{prefix}_{label}_cpu_ratio", cpu[label] / cpu["baseline"])
    return {label: cpu[label] / cpu["baseline"] for label in ("every1", "every10")}


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    tf_steps.single_thread()
    # Steps per repetition are multiples of 10, so every repetition of the
    # every-10 loop holds the same number of recorded steps.
    (small_steps, small_reps), (big_steps, big_reps) = (
        ((20, 9), (10, 5)) if args.quick else ((100, 21), (20, 11))
    )
    with tempfile.TemporaryDirectory() as root:
        big = _measure("mlp1m", big_steps, big_reps, root)
        small = _measure("dqn_mlp", small_steps, small_reps, root)
    harness.report("drift_every_step_cpu_ratio", small["every1"])
    harness.report("mlp1m_drift_every_10_steps_cpu_ratio", big["every10"])
    harness.report("drift_every_10_steps_cpu_ratio", small["every10"])


if __name__ == "__main__":
    main()
