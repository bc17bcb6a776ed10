"""A recorded TF2 loop whose logdir fails mid-run, at the recorder's default
flush settings, for tests/e2e/reliability/test_damaged_writing.py. Runs in a subprocess
(RLIMIT_FSIZE, chattr and a deleted logdir must not touch the test process):

  python -m tests.support.damaged_writing_run LOGDIR {full,readonly,delete} STEPS FAULT_AT HEAL_AT

Every step is recorded. At step FAULT_AT the event file may grow no more
(`full`: RLIMIT_FSIZE at its current size, SIGXFSZ ignored, as a full disk),
is made immutable (`readonly`: chattr +i), or the logdir is deleted
(`delete`); at HEAL_AT the fault is undone. Prints one JSON line: steps
trained, the sink's fault counts and dropped steps, warnings.
"""

from __future__ import annotations

import glob
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import warnings


def fault(logdir: str, kind: str, heal: bool) -> None:
    files = glob.glob(os.path.join(logdir, "*tfevents*"))
    if kind == "full":
        limit = resource.RLIM_INFINITY if heal else sum(os.path.getsize(p) for p in files)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    elif kind == "readonly":
        subprocess.run(["chattr", "-i" if heal else "+i", *files], check=True)
    elif heal:
        os.makedirs(logdir, exist_ok=True)
    else:
        shutil.rmtree(logdir)


def main(logdir: str, kind: str, steps: int, fault_at: int, heal_at: int) -> None:
    import keras
    import tensorflow as tf

    from tb_gradscope.core.warn import GradscopeWarning
    from tb_gradscope.record import Recorder

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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", GradscopeWarning)
        for step in range(steps):
            if step in (fault_at, heal_at):
                fault(logdir, kind, heal=step == heal_at)
            train_step()
        rec.close()
    sink = rec._s.emitter.sink  # noqa: SLF001
    print(
        json.dumps(
            {
                "trained": steps,
                "losses": sink.losses,
                "reopened": sink.reopened,
                "dropped": sink.dropped,
                "warnings": [
                    str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)
                ],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6]))
