"""How a demo run records: one event file per run, shared by Recorder and DriftMonitor.

Both write to the run's default `tf.summary` writer, so each run directory
holds a single event file (TensorBoard's Python loader reads a directory's
files one after another and would miss records of a file written alongside).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Mapping, Sequence

import tensorflow as tf

from tb_gradscope.pairs import DriftMonitor, Pair
from tb_gradscope.record import Recorder


@contextlib.contextmanager
def run_writer(run_dir: str) -> Iterator[None]:
    """Makes a file writer for `run_dir` the default while the run trains."""
    writer = tf.summary.create_file_writer(run_dir)
    with writer.as_default():
        yield
    writer.close()


def recorder(models: Mapping[str, Any], every_n_steps: int) -> Recorder:
    """A Recorder on the default writer, scopes rooted at the given model names."""
    return Recorder(logdir=None, every_n_steps=every_n_steps, models=dict(models))


def drift_monitor(pairs: Sequence[Pair], rec: Recorder, every_n_steps: int,
                  optimizer: Any) -> DriftMonitor:
    """A DriftMonitor on the default writer, counting steps with `rec.step`.

    `optimizer` lets the monitor notice a target the optimizer writes (the dqn
    leaky twin's).
    """
    return DriftMonitor(list(pairs), logdir=None, every_n_steps=every_n_steps,
                        step=rec.step, optimizers=[optimizer])
