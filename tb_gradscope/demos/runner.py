"""Runs demos in one process: LOGDIR/<demo>/<twin> for each chosen demo and twin.

One process for all runs, because importing TensorFlow costs seconds and a
demo twin trains in about as long. Each demo directory also gets a rules file,
LOGDIR/<demo>/rules.toml, so `tb-gradscope check LOGDIR/<demo> --rules
LOGDIR/<demo>/rules.toml` shows what the leaky twin breaks.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import TextIO

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
    overwrite: bool = False,
) -> list[RunReport]:
    """Trains every twin of the chosen demos (all when `only` is empty).

    Args:
      logdir: parent directory; each run writes LOGDIR/<demo>/<twin>.
      only: demo names to run, in the order given.
      steps: optimizer steps per run (None: each demo's default).
      seed: seed of every run (each run reseeds, so runs do not depend on order).
      env: CartPole choice for the RL demos ("auto", "builtin", "gymnasium").
      stream: where progress goes (stderr by default).
      overwrite: delete a chosen demo's earlier runs under LOGDIR first.

    Raises:
      ValueError: an unknown demo name, or steps < 1.
      FileExistsError: a chosen demo already has runs under LOGDIR and
        `overwrite` is False.
    """
    if steps is not None and steps < 1:
        raise ValueError(f"--steps must be at least 1, got {steps}")
    names = list(dict.fromkeys(only)) or list(demo_spec.DEMO_NAMES)
    unknown = [n for n in names if n not in demo_spec.DEMO_NAMES]
    if unknown:
        raise ValueError(
            f"unknown demo(s) {unknown}; choose from {', '.join(demo_spec.DEMO_NAMES)}"
        )
    stream = stream if stream is not None else sys.stderr
    names = _installed(names, chosen=bool(only), stream=stream)
    for name in names:
        _clear_or_refuse(os.path.join(logdir, name), overwrite)
    demo_spec.prepare_imports(names)
    demos = [demo_spec.load_demo(name) for name in names]
    reports = []
    for demo in demos:
        write_rules_file(os.path.join(logdir, demo.name), demo)
        for twin in demo.twins:
            run_dir = os.path.join(logdir, demo.name, twin)
            n = steps or demo.default_steps
            bar = ProgressBar(f"{demo.name}/{twin}", n, stream)
            started = time.perf_counter()
            result = demo.train(
                demo_spec.RunSpec(
                    twin=twin, run_dir=run_dir, steps=n, seed=seed, env=env, on_step=bar.update
                )
            )
            bar.finish(n)
            reports.append(
                RunReport(demo.name, twin, run_dir, n, time.perf_counter() - started, result)
            )
    return reports


EXTRAS = {"torch": "tb-gradscope[torch]", "tensorflow": "tb-gradscope[tensorflow]"}


def _installed(names: list[str], chosen: bool, stream: TextIO) -> list[str]:
    """The demos whose framework is installed. Demos the user chose by name
    must all be; of the default set, the others are skipped with a note."""
    missing = [n for n in names if not demo_spec.installed(n)]
    if not missing:
        return names
    frameworks = sorted({demo_spec.framework(n) for n in missing})
    how = " and ".join(f"pip install '{EXTRAS[f]}'" for f in frameworks)
    if chosen:
        raise ValueError(
            f"demo(s) {', '.join(missing)} need {' and '.join(frameworks)}, "
            f"which is not installed; {how}"
        )
    print(
        f"skipping {', '.join(missing)}: {' and '.join(frameworks)} not installed ({how})",
        file=stream,
    )
    return [n for n in names if n not in missing]


def _clear_or_refuse(demo_dir: str, overwrite: bool) -> None:
    """New runs must not land next to old event files: TensorBoard would merge them."""
    old = glob.glob(os.path.join(glob.escape(demo_dir), "**", "*tfevents*"), recursive=True)
    if not old:
        return
    if not overwrite:
        raise FileExistsError(
            f"{demo_dir} already holds demo runs ({len(old)} event file(s)); new runs "
            "would mix with them in TensorBoard. Remove it, pick another LOGDIR, "
            "or pass --overwrite"
        )
    shutil.rmtree(demo_dir)


RULES_FILE = "rules.toml"


def write_rules_file(demo_dir: str, demo: demo_spec.Demo) -> str:
    """Writes DEMO_DIR/rules.toml listing `demo.rules`; returns its path."""
    os.makedirs(demo_dir, exist_ok=True)
    path = os.path.join(demo_dir, RULES_FILE)
    lines = [
        f"# Rules of the '{demo.name}' demo: its clean twin keeps them, its leaky",
        f"# twin ({demo.leak}) breaks them.",
        f"# tb-gradscope check {demo_dir} --rules {path}",
        "rules = [",
        *(f"  {json.dumps(rule)}," for rule in demo.rules),
        "]",
    ]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path
