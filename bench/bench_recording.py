"""Recording overhead: a training loop with the Recorder against the same loop without.

Two models, each trained by a tf.function step:
  - `dqn`: Nature-DQN sized (3 conv + 512 dense, ~1.7M params, 84x84x4 input,
    batch 32) with a target network behind tf.stop_gradient and a TD loss;
  - `mlp1m`: a ~1M-parameter MLP (512-1024-512-10, batch 256).
For each model the baseline step (tape.gradient + optimizer.apply_gradients)
and the recorded steps (rec.tape / rec.gradients / rec.apply, every step and at
the default every_n_steps=10) run round-robin in the same process; figures are
medians of the repetitions and ratios are recorded / baseline, in wall time
and in process CPU time. The headline ratios are CPU-time ratios with TF on one
thread: on a shared machine other processes inflate wall time at random, and
a spinning thread pool turns contention into CPU time; neither is our work.

    python bench/bench_recording.py --quick   # < 60 s
    python bench/bench_recording.py           # full

Headline (last two lines): overhead_every_step_ratio (mlp1m, target <= 1.05)
and overhead_default_ratio (dqn, target <= 1.03).
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

DEFAULT_EVERY = 10


def dqn_model(name: str) -> keras.Model:
    inputs = keras.Input((84, 84, 4))
    h = keras.layers.Conv2D(32, 8, strides=4, activation="relu", name="conv1")(inputs)
    h = keras.layers.Conv2D(64, 4, strides=2, activation="relu", name="conv2")(h)
    h = keras.layers.Conv2D(64, 3, strides=1, activation="relu", name="conv3")(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(512, activation="relu", name="fc")(h)
    return keras.Model(inputs, keras.layers.Dense(6, name="q")(h), name=name)


def mlp_model(name: str) -> keras.Model:
    inputs = keras.Input((512,))
    h = keras.layers.Dense(1024, activation="relu", name="l1")(inputs)
    h = keras.layers.Dense(512, activation="relu", name="l2")(h)
    return keras.Model(inputs, keras.layers.Dense(10, name="out")(h), name=name)


def dqn_setup():
    online, target = dqn_model("online"), dqn_model("target")
    rng = np.random.default_rng(0)
    batch = (
        tf.constant(rng.random((32, 84, 84, 4), np.float32)),
        tf.constant(rng.integers(0, 6, 32)),
        tf.constant(rng.random(32, np.float32)),
        tf.constant(rng.random((32, 84, 84, 4), np.float32)),
    )

    def losses(s, a, r, s2):
        q = tf.gather(online(s), a, batch_dims=1)
        y = r + 0.99 * tf.reduce_max(tf.stop_gradient(target(s2)), axis=1)
        return {"td": tf.reduce_mean(keras.losses.huber(y[:, None], q[:, None]))}

    return online, {"online": online, "target": target}, losses, batch


def mlp_setup():
    model = mlp_model("mlp")
    rng = np.random.default_rng(1)
    batch = (
        tf.constant(rng.normal(size=(256, 512)).astype(np.float32)),
        tf.constant(rng.integers(0, 10, 256)),
    )

    def losses(x, y):
        logits = model(x)
        ce = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        return {"ce": tf.reduce_mean(ce)}

    return model, {"mlp": model}, losses, batch


def measure(prefix, setup, steps, repetitions, logdir):
    model, models, losses, batch = setup()
    candidates = {"baseline": tf_steps.baseline_step(model.trainable_variables, losses)}
    recorders = []
    for label, every in (("every_step", 1), ("default", DEFAULT_EVERY)):
        step, rec = tf_steps.recorded_step(
            model.trainable_variables,
            models,
            losses,
            every,
            os.path.join(logdir, f"{prefix}_{label}"),
        )
        candidates[label] = step
        recorders.append(rec)

    wall, cpu = harness.step_medians(candidates, batch, steps, repetitions)
    for rec in recorders:
        rec.close()
    report(f"{prefix}_params", int(sum(np.prod(v.shape) for v in model.trainable_variables)))
    report(f"{prefix}_baseline_ms_per_step", 1000 * wall["baseline"] / steps)
    report(f"{prefix}_baseline_cpu_ms_per_step", 1000 * cpu["baseline"] / steps)
    for label in ("every_step", "default"):
        report(f"{prefix}_{label}_ms_per_step", 1000 * wall[label] / steps)
        report(f"{prefix}_{label}_wall_ratio", wall[label] / wall["baseline"])
        report(f"{prefix}_{label}_cpu_ratio", cpu[label] / cpu["baseline"])
    return {label: cpu[label] / cpu["baseline"] for label in ("every_step", "default")}


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    tf_steps.single_thread()
    steps, repetitions = (3, 7) if args.quick else (10, 31)
    with tempfile.TemporaryDirectory() as logdir:
        mlp = measure("mlp1m", mlp_setup, steps, repetitions, logdir)
        dqn = measure("dqn", dqn_setup, steps, repetitions, logdir)
    report("overhead_every_step_ratio", mlp["every_step"])
    report("overhead_default_ratio", dqn["default"])


if __name__ == "__main__":
    main()
