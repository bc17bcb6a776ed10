"""A recorder's warning is printed once, whatever the user's logging setup."""

from __future__ import annotations

import os
import subprocess
import sys

_PROGRAM = """
import logging, sys
from tb_gradscope.record._warn import warn_once
if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.WARNING, format="log: %(message)s")
warn_once("key", "step 4's update was not measured")
warn_once("key", "step 4's update was not measured")
"""


def _stderr(setup: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, setup],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return done.stderr


def test_a_warning_is_printed_once_without_logging_configured():
    assert _stderr("bare").count("was not measured") == 1


def test_a_configured_logger_receives_the_warning_too():
    err = _stderr("configured")
    assert "log: step 4's update was not measured" in err


_EAGER_LOOP = """
import keras, tensorflow as tf
from tb_gradscope import Recorder
net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="l1")], name="net")
rec = Recorder(sys.argv[1], every_n_steps=1, models={"net": net})
opt = keras.optimizers.SGD(0.1)
for _ in range(2):
    with rec.tape() as tape:  # gradients taken inside the tape's context, as many loops do
        out = net(tf.ones((4, 3)))
        losses = {"a": tf.reduce_mean(out ** 2), "b": tf.reduce_mean(out)}
        rec.apply(opt, rec.gradients(tape, losses, net.trainable_variables))
rec.close()
print("RECORDED", flush=True)
with tf.GradientTape(persistent=True) as own:  # the control: TF warns on the user's own tape
    y = tf.reduce_sum(net(tf.ones((4, 3))))
    own.gradient(y, net.trainable_variables)
"""


def test_gradients_inside_the_recorders_persistent_tape_do_not_warn(tmp_path):
    """`rec.tape()` is persistent only so that each loss can be differentiated; taking
    the gradients inside its context must not record them on the tape (TF's
    "persistent tape inside its context" warning)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-c", "import sys\n" + _EAGER_LOOP, str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, in order
        text=True,
        env=env,
        timeout=180,
        check=True,
    )
    ours, _, control = done.stdout.partition("RECORDED")
    warning = "persistent tape inside its context"
    assert warning not in ours, ours
    assert warning in control, "the control no longer warns: the test proves nothing"
