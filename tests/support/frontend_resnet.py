"""A ResNet-50-sized run for the tab's scale tests (issue 23).

A real `keras.applications.ResNet50(weights=None)` ("online", ~320 variables
with its BatchNorm moving statistics) with an EMA twin ("target", updated by
Polyak averaging of every weight, moving statistics included), a
classification head and a BYOL-style predictor, trained on tiny random images
under the real Recorder with two losses: `cls` (cross-entropy of the head) and
`byol` (the predictor's output regressed onto the target's features, cut by
`tf.stop_gradient`). The same losses go to a sibling run as plain scalars, so
the Scalars tab has the same steps to draw. No leak: the target is cut and
moves only by its average, from the first step (no warm-up: the online
network's first steps move it far from the fresh copy, which `doctor` must
not mistake for a twin never synced), so `doctor` and `check` find nothing.
Test modules load this file as a plugin (`pytest_plugins`) for its session
fixture `resnet_tensorboard`.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from tests.support.byol_step import byol_step
from tests.support.frontend_fixtures import TensorBoard, start_tensorboard, stop_tensorboard

RUN = "resnet50/train"
SCALARS_RUN = "resnet50/scalars"
IMAGE = (32, 32, 3)
BATCH = 4
TAU = 0.01
EVERY = 5
STEPS = 21  # recorded at steps 0, 5, 10, 15, 20


def train_resnet(logdir: pathlib.Path, steps: int = STEPS) -> None:
    """Trains the online ResNet-50 and its EMA twin for `steps` steps into
    logdir/RUN (gradscope records) and logdir/SCALARS_RUN (the losses)."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tb_gradscope.pairs import pair_models
    from tb_gradscope.record import Recorder

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    online = keras.applications.ResNet50(
        weights=None, include_top=False, pooling="avg", input_shape=IMAGE, name="online"
    )
    target = keras.applications.ResNet50(
        weights=None, include_top=False, pooling="avg", input_shape=IMAGE, name="target"
    )
    target.set_weights(online.get_weights())
    head = keras.Sequential(
        [keras.Input((2048,)), keras.layers.Dense(10, name="logits")], name="head"
    )
    predictor = keras.Sequential(
        [
            keras.Input((2048,)),
            keras.layers.Dense(256, activation="relu", name="hidden"),
            keras.layers.Dense(2048, name="out"),
        ],
        name="predictor",
    )
    optimizer = keras.optimizers.SGD(1e-3)
    rec = Recorder(
        logdir=str(logdir / RUN),
        every_n_steps=EVERY,
        models={"online": online, "target": target, "head": head, "predictor": predictor},
        pairs=[pair_models(target, online, tau=TAU)],
        rules=["never(*, target/*)", f"tracks(target, online, tau={TAU})"],
    )
    train_step = byol_step(rec, online, target, head, predictor, optimizer, TAU)

    scalars = tf.summary.create_file_writer(str(logdir / SCALARS_RUN))
    for step in range(steps):
        x = rng.normal(size=(BATCH, *IMAGE)).astype("float32")
        labels = rng.integers(0, 10, BATCH).astype("int32")
        cls, byol = train_step(x, labels)
        with scalars.as_default():
            tf.summary.scalar("cls", cls, step=step)
            tf.summary.scalar("byol", byol, step=step)
    scalars.close()
    rec.close()


@pytest.fixture(scope="session")
def resnet_tensorboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    """A TensorBoard of its own serving the ResNet-50 run and its scalars,
    fully loaded (trains for a few minutes on two cores)."""
    logdir = tmp_path_factory.mktemp("resnet50_logs")
    train_resnet(logdir)
    tb = start_tensorboard(logdir, tmp_path_factory.mktemp("tb_resnet50") / "stderr.txt")
    try:
        tb.wait_for_runs([RUN], timeout=120)
        tb.wait_until_loaded([RUN])
        yield tb
    finally:
        stop_tensorboard(tb.process)
