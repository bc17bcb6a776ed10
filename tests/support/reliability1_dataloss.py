"""A recorded TF2 training loop that loses its event file mid-run, for
tests/e2e/reliability/test_reliability_dataloss.py. Runs in a subprocess (RLIMIT_FSIZE and a
deleted logdir must not touch the test process):

  python -m tests.support.reliability1_dataloss LOGDIR {delete,full} STEPS FAULT_AT HEAL_AT

Every step is recorded. At step FAULT_AT the logdir is deleted (`delete`) or
the event file may grow no more (`full`: RLIMIT_FSIZE at its current size,
SIGXFSZ ignored, as a full disk); at HEAL_AT the logdir is back / the limit
lifted. Prints one JSON line: steps trained, final loss, warnings, and the
sink's loss/reopen counts.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import shutil
import signal
import sys
import warnings


def main(logdir: str, fault: str, steps: int, fault_at: int, heal_at: int) -> None:
    import keras
    import tensorflow as tf

    from tb_gradscope.core.warn import GradscopeWarning
    from tb_gradscope.record import Recorder
    from tb_gradscope.record import _writing as writing

    writing.FLUSH_SECS = 0.0  # check at every record: the test sees each step's fate
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, name="l1")], name="net")
    optimizer = keras.optimizers.SGD(0.01)
    rec = Recorder(logdir, every_n_steps=1, models=model)
    x = tf.random.stateless_normal((16, 4), seed=(1, 2))

    @tf.function
    def train_step():
        with rec.tape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - 1.0))
        rec.apply(optimizer, rec.gradients(tape, {"mse": loss}, model.trainable_variables))
        return loss

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    loss = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GradscopeWarning)
        for step in range(steps):
            if step == fault_at:
                if fault == "delete":
                    shutil.rmtree(logdir)
                else:
                    size = sum(
                        os.path.getsize(p) for p in glob.glob(os.path.join(logdir, "*tfevents*"))
                    )
                    resource.setrlimit(resource.RLIMIT_FSIZE, (size, resource.RLIM_INFINITY))
            if step == heal_at:
                if fault == "delete":
                    os.makedirs(logdir, exist_ok=True)
                else:
                    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY,) * 2)
            loss = float(train_step())
        rec.close()
    sink = rec._s.emitter.sink  # noqa: SLF001
    print(
        json.dumps(
            {
                "trained": steps,
                "loss": loss,
                "losses": sink.losses,
                "reopened": sink.reopened,
                "warnings": [
                    str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)
                ],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]))
