"""Gradient-conflict overhead: recording with conflict=True against conflict=False.

A three-loss model (a ~0.6M-parameter shared trunk, three heads, batch 128)
trained by a tf.function step through the Recorder, with conflict recording on
and off, run round-robin in the same process (plus a plain step without any
recorder, for scale). Recording every step shows the cost of the cosines
themselves (three pairs: per-variable dot products rolled up per scope); the
default every_n_steps=10 shows what a user pays. Figures are medians; ratios
are CPU-time ratios with TF on one thread, as in bench_recording.py.

    python bench/bench_conflict.py --quick   # < 60 s
    python bench/bench_conflict.py           # full

Headline (last line): conflict_overhead_default_ratio, recording with conflict
over recording without it at every_n_steps=10 (target <= 1.03).
"""

from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench import harness, tf_steps  # noqa: E402
from bench.harness import parse_args, report  # noqa: E402
from tb_gradscope.record import Recorder  # noqa: E402

DEFAULT_EVERY = 10


def three_head_model() -> keras.Model:
    inputs = keras.Input((256,))
    h = keras.layers.Dense(1024, activation="relu", name="trunk1")(inputs)
    h = keras.layers.Dense(384, activation="relu", name="trunk2")(h)
    heads = [keras.layers.Dense(8, name=f"head_{k}")(h) for k in "abc"]
    return keras.Model(inputs, heads, name="net")


def losses_of(model, x, y):
    a, b, c = model(x)
    return {
        "a": tf.reduce_mean((a - y) ** 2),
        "b": tf.reduce_mean(tf.abs(b + y)),
        "c": tf.reduce_mean(c**2) + 0.1 * tf.reduce_mean(a * c),
    }


def plain_step(model):
    opt = keras.optimizers.Adam(1e-4)
    variables = model.trainable_variables
    opt.build(variables)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.add_n(list(losses_of(model, x, y).values()))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return step


def recorded_step(model, every, conflict, logdir):
    opt = keras.optimizers.Adam(1e-4)
    variables = model.trainable_variables
    opt.build(variables)
    rec = Recorder(logdir=logdir, every_n_steps=every, models={"net": model}, conflict=conflict)

    @tf.function
    def step(x, y):
        with rec.tape() as tape:
            named = losses_of(model, x, y)
        rec.apply(opt, rec.gradients(tape, named, variables))
        return tf.add_n(list(named.values()))

    return step, rec


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    tf_steps.single_thread()
    steps, repetitions = (5, 5) if args.quick else (20, 21)
    keras.utils.set_random_seed(0)
    model = three_head_model()
    rng = np.random.default_rng(0)
    batch = (
        tf.constant(rng.normal(size=(128, 256)).astype(np.float32)),
        tf.constant(rng.normal(size=(128, 8)).astype(np.float32)),
    )
    candidates = {"plain": plain_step(model)}
    recorders = []
    with tempfile.TemporaryDirectory() as logdir:
        for every, label in ((1, "every_step"), (DEFAULT_EVERY, "default")):
            for conflict in (False, True):
                name = f"{label}_{'conflict' if conflict else 'no_conflict'}"
                step, rec = recorded_step(model, every, conflict, os.path.join(logdir, name))
                candidates[name] = step
                recorders.append(rec)

        wall, cpu = harness.step_medians(candidates, batch, steps, repetitions)
        for rec in recorders:
            rec.close()
    report("params", int(sum(np.prod(v.shape) for v in model.trainable_variables)))
    report("losses", 3)
    report("plain_cpu_ms_per_step", 1000 * cpu["plain"] / steps)
    ratios = {}
    for label in ("every_step", "default"):
        with_c, without = cpu[f"{label}_conflict"], cpu[f"{label}_no_conflict"]
        report(f"{label}_no_conflict_cpu_ms_per_step", 1000 * without / steps)
        report(f"{label}_conflict_cpu_ms_per_step", 1000 * with_c / steps)
        report(
            f"{label}_conflict_wall_ratio", wall[f"{label}_conflict"] / wall[f"{label}_no_conflict"]
        )
        ratios[label] = with_c / without
    report("conflict_overhead_every_step_ratio", ratios["every_step"])
    report("conflict_overhead_default_ratio", ratios["default"])


if __name__ == "__main__":
    main()
