"""Runs demos in one process: LOGDIR/<demo>/<twin> for each chosen demo and twin.

One process for all runs, because importing TensorFlow costs seconds and a
demo twin trains in about as long.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from typing import Sequence, TextIO

from tb_gradscope.demos import spec as demo_spec
from tb_gradscope.demos.progress import ProgressBar


@dataclasses.dataclass(frozen=True)
class RunReport:
    """How one (demo, twin) run went."""

    demo: str
    twin: str
    run_dir: str
    steps: int
    seconds: float
    result: demo_spec.RunResult


def run_demos(
    logdir: str,
    only: Sequence[str] = (),
    steps: int | None = None,
    seed: int = demo_spec.DEFAULT_SEED,
    env: str = "auto",
    stream: TextIO | None = None,
) -> list[RunReport]:
    """Trains every twin of the chosen demos (all when `only` is empty).

    Args:
      logdir: parent directory; each run writes LOGDIR/<demo>/<twin>.
      only: demo names to run, in the order given.
      steps: optimizer steps per run (None: each demo's default).
      seed: seed of every run (each run reseeds, so runs do not depend on order).
      env: CartPole choice for the RL demos ("auto", "builtin", "gymnasium").
      stream: where progress goes (stderr by default).

    Raises:
      ValueError: an unknown demo name, or steps < 1.
    """
    if steps is not None and steps < 1:
        raise ValueError(f"--steps must be at least 1, got {steps}")
    names = list(dict.fromkeys(only)) or list(demo_spec.DEMO_NAMES)
    demos = [demo_spec.load_demo(name) for name in names]
    stream = stream if stream is not None else sys.stderr
    reports = []
    for demo in demos:
        for twin in demo.twins:
            run_dir = os.path.join(logdir, demo.name, twin)
            n = steps or demo.default_steps
            bar = ProgressBar(f"{demo.name}/{twin}", n, stream)
            started = time.perf_counter()
            result = demo.train(
                demo_spec.RunSpec(twin=twin, run_dir=run_dir, steps=n, seed=seed,
                                  env=env, on_step=bar.update)
            )
            bar.finish(n)
            reports.append(RunReport(demo.name, twin, run_dir, n,
                                     time.perf_counter() - started, result))
    return reports
