"""Recording under MirroredStrategy: the cross-replica reduction's cost against the distributed step.

Two logical CPU devices, MirroredStrategy, an MLP (256-512-256-10, global batch
128, Adam), a tf.function step calling `strategy.run`. Candidates, run
round-robin in one process with the order rotated every round (medians of the
repetitions; ratios are candidate / `baseline` in process CPU time, TF on one
thread as in bench_recording):
  - `baseline`: the distributed step without tb_gradscope (Keras all-reduces
    the gradients inside apply_gradients);
  - `reduction`: the baseline plus, at every step, the recorder's own
    cross-replica reduction of the gradients (`distribute.record_global`,
    the merge_call and the strategy's sum, as a recorded step does it), whose
    result only feeds one norm;
  - `every_step` / `default`: a Recorder (way 2) inside strategy.run at
    every_n_steps=1 and at the default 10.

    python -m bench.bench_distribute --quick   # < 60 s
    python -m bench.bench_distribute           # full

Headline (last line): distributed_reduction_ratio, the reduction at every step
as a ratio to the distributed step without it.
"""

from __future__ import annotations

import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench.harness import parse_args, report, step_medians  # noqa: E402
from tb_gradscope.record import Recorder  # noqa: E402
from tb_gradscope.record import _distribute as distribute

GLOBAL_BATCH = 128
DEFAULT_EVERY = 10  # Recorder's default every_n_steps


def two_devices() -> tf.distribute.MirroredStrategy:
    """MirroredStrategy over two logical CPUs, TF on one thread."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    return tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])


def mlp() -> keras.Model:
    inputs = keras.Input((256,))
    h = keras.layers.Dense(512, activation="relu", name="l1")(inputs)
    h = keras.layers.Dense(256, activation="relu", name="l2")(h)
    return keras.Model(inputs, keras.layers.Dense(10, name="out")(h), name="mlp")


def make_step(strategy: tf.distribute.Strategy, kind: str, logdir: str):
    """A distributed train step of `kind` (see the module docstring), and its recorder."""
    with strategy.scope():
        model = mlp()
        optimizer = keras.optimizers.Adam(1e-4)
        optimizer.build(model.trainable_variables)
        every = {"every_step": 1, "default": DEFAULT_EVERY}.get(kind)
        recorder = Recorder(logdir, every_n_steps=every, models=model) if every else None
    variables = model.trainable_variables
    share = GLOBAL_BATCH // strategy.num_replicas_in_sync

    def loss_of(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        start = tf.distribute.get_replica_context().replica_id_in_sync_group * share
        logits = model(x[start : start + share])
        ce = keras.losses.sparse_categorical_crossentropy(
            y[start : start + share], logits, from_logits=True
        )
        return tf.reduce_sum(ce) / GLOBAL_BATCH

    def replica(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        if recorder is not None:
            with recorder.tape() as tape:
                loss = loss_of(x, y)
            recorder.apply(optimizer, recorder.gradients(tape, {"ce": loss}, variables))
            return loss
        with tf.GradientTape() as tape:
            loss = loss_of(x, y)
        grads = tape.gradient(loss, variables)
        if kind == "reduction":
            norm = distribute.record_global(
                tf.constant(True),
                lambda: {"ce": grads},
                lambda summed: tf.add_n([tf.norm(g) for g in summed["ce"]()]),
                on_error=_raise,
            )
            loss += 0.0 * norm
        optimizer.apply_gradients(zip(grads, variables))
        return loss

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> tf.Tensor:
        return strategy.reduce(
            tf.distribute.ReduceOp.SUM, strategy.run(replica, args=(x, y)), axis=None
        )

    return step, recorder


def _raise(error: Exception) -> None:
    raise error


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    strategy = two_devices()
    steps, repetitions = (10, 15) if args.quick else (20, 41)
    rng = np.random.default_rng(0)
    batch = (
        tf.constant(rng.normal(size=(GLOBAL_BATCH, 256)).astype(np.float32)),
        tf.constant(rng.integers(0, 10, GLOBAL_BATCH)),
    )
    report("load_average_1m", os.getloadavg()[0])
    with tempfile.TemporaryDirectory() as logdir:
        made = {
            kind: make_step(strategy, kind, os.path.join(logdir, kind))
            for kind in ("baseline", "reduction", "every_step", "default")
        }
        wall, cpu = step_medians(
            {kind: step for kind, (step, _) in made.items()}, batch, steps, repetitions
        )
        for _, recorder in made.values():
            if recorder is not None:
                recorder.close()
    report("replicas", strategy.num_replicas_in_sync)
    report("baseline_cpu_ms_per_step", 1000 * cpu["baseline"] / steps)
    for kind in ("every_step", "default", "reduction"):
        report(f"distributed_{kind}_wall_ratio", wall[kind] / wall["baseline"])
        report(f"distributed_{kind}_cpu_ratio", cpu[kind] / cpu["baseline"])
    report("load_average_1m_end", os.getloadavg()[0])
    report("distributed_reduction_ratio", cpu["reduction"] / cpu["baseline"])


if __name__ == "__main__":
    main()
