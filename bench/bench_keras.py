"""Keras fit overhead: GradscopeCallback against fit without it and against Keras's TensorBoard.

One two-output model (shared body, `q` and `aux` heads, weighted losses) per
configuration, each compiled and warmed up by one fit before timing:

- `plain`: `model.fit` with no callback;
- `gradscope`: with `GradscopeCallback` at its default frequency
  (every_n_batches=10);
- `gradscope_every1`: recording every batch (the most it ever costs);
- `tensorboard`: with `keras.callbacks.TensorBoard(histogram_freq=1)`.

Configurations run round-robin in one process (order rotated every round);
figures are medians of one-epoch fits, in wall time and process CPU time. TF
runs on one thread, and the headline ratios are CPU-time ratios: on a shared
machine other processes inflate wall time at random.

    python -m bench.bench_keras --quick   # < 60 s
    python -m bench.bench_keras           # full

Headline (last line): gradscope_default_cpu_ratio (gradscope / plain).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable

import keras
import numpy as np

from bench import harness, tf_steps
from tb_gradscope.integrations.keras import GradscopeCallback


def _model(width: int) -> keras.Model:
    keras.utils.set_random_seed(0)
    inputs = keras.Input((32,))
    body = keras.layers.Dense(width, activation="relu", name="body1")(inputs)
    body = keras.layers.Dense(width, activation="relu", name="body2")(body)
    q = keras.layers.Dense(8, name="q")(body)
    aux = keras.layers.Dense(1, name="aux")(keras.layers.Dense(width // 2, name="aux_hidden")(body))
    model = keras.Model(inputs, {"q": q, "aux": aux}, name="agent")
    model.compile(
        keras.optimizers.Adam(1e-3),
        loss={"q": "mse", "aux": "mse"},
        loss_weights={"q": 1.0, "aux": 0.2},
    )
    return model


def _fit(width: int, batches: int, batch: int, callbacks: list) -> Callable[[], None]:
    """A callable running a one-epoch fit of `batches` batches (warmed up once)."""
    model = _model(width)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(batches * batch, 32)).astype("float32")
    y = {
        "q": rng.normal(size=(batches * batch, 8)).astype("float32"),
        "aux": rng.normal(size=(batches * batch, 1)).astype("float32"),
    }

    def run() -> None:
        model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=callbacks)

    run()
    return run


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    tf_steps.single_thread()
    width, batches, batch, reps = (64, 30, 32, 3) if args.quick else (256, 200, 64, 11)
    root = tempfile.mkdtemp(prefix="bench_keras_")
    runs = {
        "plain": _fit(width, batches, batch, []),
        "gradscope": _fit(width, batches, batch, [GradscopeCallback(f"{root}/gs")]),
        "gradscope_every1": _fit(
            width, batches, batch, [GradscopeCallback(f"{root}/gs1", every_n_batches=1)]
        ),
        "tensorboard": _fit(
            width, batches, batch, [keras.callbacks.TensorBoard(f"{root}/tb", histogram_freq=1)]
        ),
    }
    wall, cpu = harness.rotated_medians(runs, reps)
    harness.report("batches_per_fit", batches)
    harness.report("width", width)
    harness.report("plain_ms_per_batch", 1000 * wall["plain"] / batches)
    for name in ("gradscope", "gradscope_every1", "tensorboard"):
        harness.report(f"{name}_ms_per_batch", 1000 * wall[name] / batches)
        harness.report(f"{name}_wall_ratio", wall[name] / wall["plain"])
    harness.report("gradscope_every1_cpu_ratio", cpu["gradscope_every1"] / cpu["plain"])
    harness.report("tensorboard_hist1_cpu_ratio", cpu["tensorboard"] / cpu["plain"])
    harness.report(
        "gradscope_vs_tensorboard_hist1_cpu_ratio", cpu["gradscope"] / cpu["tensorboard"]
    )
    harness.report("gradscope_default_cpu_ratio", cpu["gradscope"] / cpu["plain"])


if __name__ == "__main__":
    main()
