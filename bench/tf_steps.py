"""TensorFlow pieces the recording benchmarks share: one TF thread, and the
plain and recorded train steps every overhead ratio compares.

Not a benchmark itself (run_all runs only bench_*.py).
"""

from __future__ import annotations

import os

# Also asked for here, before anything imported below can start TF's runtime
# (a module-level tensor does): set_*_parallelism_threads is refused after.
_ONE_THREAD = {"TF_NUM_INTRAOP_THREADS": "1", "TF_NUM_INTEROP_THREADS": "1"}
for _name, _value in _ONE_THREAD.items():
    os.environ.setdefault(_name, _value)

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from tb_gradscope.record import Recorder  # noqa: E402


def single_thread() -> None:
    """One TF thread: Eigen's pool spins while waiting, so on a busy machine the
    CPU time of a multi-threaded step measures contention, not work."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # the runtime already started, with the environment's threads
        if any(os.environ.get(name) != value for name, value in _ONE_THREAD.items()):
            raise


def built_optimizer(variables):
    """Adam, built before tracing so both candidates trace the same slots."""
    opt = keras.optimizers.Adam(1e-4)
    opt.build(variables)
    return opt


def baseline_step(variables, losses):
    """The same training step without tb_gradscope."""
    opt = built_optimizer(variables)

    @tf.function
    def step(*batch):
        with tf.GradientTape() as tape:
            loss = tf.add_n(list(losses(*batch).values()))
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    return step


def recorded_step(variables, models, losses, every, logdir, **options):
    """The step recorded the recorder-owned-tape way (way 2), with further
    Recorder `options`; returns (step, rec)."""
    opt = built_optimizer(variables)
    rec = Recorder(logdir=logdir, every_n_steps=every, models=models, **options)

    @tf.function
    def step(*batch):
        with rec.tape() as tape:
            named = losses(*batch)
        rec.apply(opt, rec.gradients(tape, named, variables))
        return tf.add_n(list(named.values()))

    return step, rec
