"""Training runs for tests/unit/record/test_distribute.py, each in a process of its own.

TensorFlow fixes its devices when it starts, so runs that need two logical CPU
devices, or a multi-worker cluster (TF_CONFIG), cannot share the test process:

    python -m tests.support.distribute_runs mirrored OUT   # 2 logical CPUs: MirroredStrategy and one device
    python -m tests.support.distribute_runs worker OUT     # one MultiWorkerMirroredStrategy worker (TF_CONFIG)
    python -m tests.support.distribute_runs mixed OUT      # mixed_float16 (against loop_single, fit_single); a forced overflow
    TF_USE_LEGACY_KERAS=1 python -m tests.support.distribute_runs legacy OUT   # the same with tf_keras fit

Every run writes its event files under OUT/<run> and the same model sees the
same global batches whatever the strategy (so the workers' run is judged
against the mirrored process's one-device loop, `loop_single`): a custom loop
(two losses, way 2, each replica takes its share of the global batch by
replica id, per-replica losses scaled by the global batch size) and Keras
`fit` (two outputs). The process prints "done" at the end.
"""

from __future__ import annotations

import argparse
import os
import pathlib
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

STEPS = 4
GLOBAL_BATCH = 8
AUX_WEIGHT = 0.3
OVERFLOW_STEP = 2  # the batch of the mixed-precision fit run whose gradients overflow


def batches() -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(7)
    return [
        (
            rng.normal(size=(GLOBAL_BATCH, 4)).astype(np.float32),
            rng.normal(size=(GLOBAL_BATCH, 1)).astype(np.float32),
        )
        for _ in range(STEPS)
    ]


def two_output_model(name: str = "net"):
    import keras

    keras.utils.set_random_seed(3)
    inputs = keras.Input((4,))
    body = keras.layers.Dense(6, activation="tanh", name="body")(inputs)
    q = keras.layers.Dense(1, name="q", dtype="float32")(body)
    aux = keras.layers.Dense(1, name="aux", dtype="float32")(body)
    return keras.Model(inputs, {"q": q, "aux": aux}, name=name)


# With `target`: an EMA target network (pair `tgt<-net`), and rules, one of them broken.
TAU = 0.5
RULES = ["never(aux, net/q)", "never(q, net/body)"]


def loop_run(
    strategy: tf.distribute.Strategy,
    logdir: str,
    mixed: bool = False,
    overflow: bool = False,
    target: bool = False,
) -> None:
    """A custom loop with a Recorder (way 2), two losses, every step recorded.

    With `overflow` (mixed precision), batch OVERFLOW_STEP's targets are so
    large that its float16 gradients overflow: the loss scaler skips it. With
    `target`, the recorder also reads drift (an EMA target updated in the
    step) and checks RULES.
    """
    import keras

    from tb_gradscope.pairs import pair_models
    from tb_gradscope.record import Recorder

    with strategy.scope():
        model = two_output_model()
        ema = two_output_model("tgt")
        extras = dict(pairs=[pair_models(ema, model, tau=TAU)], rules=RULES) if target else {}
        optimizer = keras.optimizers.Adam(0.01)
        if mixed:
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        # Built before the step is traced: Keras 3 cannot create an optimizer's
        # slots inside a MirroredStrategy step (it fails without tb_gradscope too).
        optimizer.build(model.trainable_variables)
        recorder = Recorder(
            logdir,
            every_n_steps=1,
            models={"net": model, "tgt": ema},
            loss_scale=optimizer if mixed else None,
            **extras,
        )
    replicas = strategy.num_replicas_in_sync

    @tf.function
    def step(x: tf.Tensor, y: tf.Tensor) -> None:
        def replica() -> None:
            share = GLOBAL_BATCH // replicas
            start = tf.distribute.get_replica_context().replica_id_in_sync_group * share
            xb, yb = x[start : start + share], y[start : start + share]
            with recorder.tape() as tape:
                out = model(xb)
                losses = {
                    "q": tf.reduce_sum(tf.square(out["q"] - yb)) / GLOBAL_BATCH,
                    "aux": AUX_WEIGHT * tf.reduce_sum(tf.square(out["aux"])) / GLOBAL_BATCH,
                }
                if mixed:
                    losses = {name: optimizer.scale_loss(value) for name, value in losses.items()}
            recorder.apply(optimizer, recorder.gradients(tape, losses, model.trainable_variables))
            if target:
                for t, o in zip(ema.weights, model.weights):
                    t.assign((1 - TAU) * t + TAU * o)
                recorder.record_drift()

        strategy.run(replica)

    for index, (x, y) in enumerate(batches()):
        step(tf.constant(x), tf.constant(y * 1e4 if overflow and index == OVERFLOW_STEP else y))
    recorder.close()


def fit_run(
    strategy: tf.distribute.Strategy, logdir: str, overflow: bool = False, **compile_args: Any
) -> None:
    """Keras fit with GradscopeCallback, two compiled losses, every batch recorded.

    With `overflow`, batch OVERFLOW_STEP's targets are so large that its
    float16 gradients overflow at the loss scale: the loss scaler skips it.
    """
    import keras

    from tb_gradscope.integrations.keras import GradscopeCallback

    x = np.concatenate([b[0] for b in batches()])
    y = np.concatenate([b[1] for b in batches()])
    if overflow:
        rows = slice(OVERFLOW_STEP * GLOBAL_BATCH, (OVERFLOW_STEP + 1) * GLOBAL_BATCH)
        y[rows] *= 1e4
    with strategy.scope():
        model = two_output_model()
        model.compile(
            keras.optimizers.SGD(0.05),
            loss={"q": "mse", "aux": "mse"},
            loss_weights={"q": 1.0, "aux": AUX_WEIGHT},
            **compile_args,
        )
    model.fit(
        x,
        {"q": y, "aux": np.zeros_like(y)},
        batch_size=GLOBAL_BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[GradscopeCallback(logdir, every_n_batches=1)],
    )


def legacy_fit_run(logdir: str, overflow: bool = False) -> None:
    """tf_keras fit (TF_USE_LEGACY_KERAS=1) with LegacyGradscopeCallback, under
    the global policy; weights drawn from numpy, the same whatever the policy."""
    import tf_keras

    from tb_gradscope.integrations.keras import LegacyGradscopeCallback

    x = np.concatenate([b[0] for b in batches()])
    y = np.concatenate([b[1] for b in batches()])
    if overflow:
        y[OVERFLOW_STEP * GLOBAL_BATCH : (OVERFLOW_STEP + 1) * GLOBAL_BATCH] *= 1e4
    inputs = tf_keras.Input((4,))
    body = tf_keras.layers.Dense(6, activation="tanh", name="body")(inputs)
    model = tf_keras.Model(
        inputs, {"q": tf_keras.layers.Dense(1, name="q", dtype="float32")(body)}, name="net"
    )
    rng = np.random.default_rng(5)
    model.set_weights(
        [rng.normal(scale=0.5, size=w.shape).astype(np.float32) for w in model.get_weights()]
    )
    model.compile(tf_keras.optimizers.SGD(0.05), loss={"q": "mse"})
    model.fit(
        x,
        {"q": y},
        batch_size=GLOBAL_BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[LegacyGradscopeCallback(logdir, every_n_batches=1)],
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["mirrored", "worker", "mixed", "legacy"])
    parser.add_argument("out")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    if args.mode == "mirrored":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
        mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        one = tf.distribute.get_strategy()
        loop_run(mirrored, str(out / "loop_mirrored"))
        loop_run(one, str(out / "loop_single"))
        loop_run(mirrored, str(out / "target_mirrored"), target=True)
        loop_run(one, str(out / "target_single"), target=True)
        fit_run(mirrored, str(out / "fit_mirrored"))
        fit_run(one, str(out / "fit_single"))
    elif args.mode == "worker":
        loop_run(tf.distribute.MultiWorkerMirroredStrategy(), str(out))
    elif args.mode == "legacy":  # run with TF_USE_LEGACY_KERAS=1
        import tf_keras

        legacy_fit_run(str(out / "legacy_float32"))
        tf_keras.mixed_precision.set_global_policy("mixed_float16")
        legacy_fit_run(str(out / "legacy_mixed"))
        legacy_fit_run(str(out / "legacy_overflow"), overflow=True)
    else:
        import keras

        one = tf.distribute.get_strategy()
        keras.mixed_precision.set_global_policy("mixed_float16")
        loop_run(one, str(out / "loop_mixed"), mixed=True)
        fit_run(one, str(out / "fit_mixed"))
        loop_run(one, str(out / "loop_overflow"), mixed=True, overflow=True)
        fit_run(one, str(out / "fit_overflow"), overflow=True)
        fit_run(one, str(out / "fit_overflow_jit"), overflow=True, jit_compile=True)
        fit_run(one, str(out / "fit_overflow_spe2"), overflow=True, steps_per_execution=2)
    print("done", flush=True)


if __name__ == "__main__":
    main()
