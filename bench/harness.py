"""Shared bench plumbing: interleaved repetitions, medians, `name: value` output.

Every benchmark compares against a baseline measured in the same process,
alternating the two so that machine noise hits both alike, and reports the
ratio of medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a short run (< 60 s)")
    return parser.parse_args()


def interleaved_samples(
    candidates: dict[str, Callable[[], object]], repetitions: int
) -> dict[str, list[float]]:
    """Every wall time (s) of each callable, run round-robin `repetitions` times.

    For benches that report more than the median (a mean shows a periodic
    cost, such as a cache refresh, that a median hides).
    """
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repetitions):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return samples


def interleaved_medians(
    candidates: dict[str, Callable[[], object]], repetitions: int
) -> dict[str, float]:
    """Median wall time (s) of each callable, run round-robin `repetitions` times."""
    samples = interleaved_samples(candidates, repetitions)
    return {name: statistics.median(times) for name, times in samples.items()}


def rotated_samples(
    runs: dict[str, Callable[[], object]],
    repetitions: int,
    cpu_clock: Callable[[], float] = time.process_time,
) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Every wall and CPU time (s) of each run, round-robin, order rotated every round.

    Rotation keeps a "first after a pause" effect from always hitting the same
    candidate. CPU time is the process's (all TF threads) unless `cpu_clock`
    says otherwise; other processes on a busy machine do not inflate it the way
    they inflate wall time. Sample `i` of every run comes from round `i` (see
    `median_ratio`).
    """
    names = list(runs)
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(repetitions):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            start, start_cpu = time.perf_counter(), cpu_clock()
            runs[name]()
            wall[name].append(time.perf_counter() - start)
            cpu[name].append(cpu_clock() - start_cpu)
    return wall, cpu


def rotated_medians(
    runs: dict[str, Callable[[], object]], repetitions: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall and CPU seconds of each run of `rotated_samples`."""
    wall, cpu = rotated_samples(runs, repetitions)
    return (
        {name: statistics.median(t) for name, t in wall.items()},
        {name: statistics.median(t) for name, t in cpu.items()},
    )


def median_ratio(samples: dict[str, list[float]], candidate: str, baseline: str) -> float:
    """Median over rounds of candidate / baseline, each ratio of one round's two runs.

    Pairing by round cancels the machine's slow drifts (another process
    starting or ending), which a ratio of the two medians does not.
    """
    return statistics.median(c / b for c, b in zip(samples[candidate], samples[baseline]))


def step_loop(step: Callable[..., object], batch: tuple, steps: int) -> Callable[[], None]:
    """A run of `steps` calls of a TF step, synchronised on the last result."""

    def run() -> None:
        for _ in range(steps):
            loss = step(*batch)
        loss.numpy()  # type: ignore[attr-defined]

    return run


def step_medians(
    steps_by_name: dict[str, Callable[..., object]], batch: tuple, steps: int, repetitions: int
) -> tuple[dict[str, float], dict[str, float]]:
    """`rotated_medians` of `steps` calls of each TF step, after one untimed run
    of each (tracing and warm-up stay out of the timing)."""
    runs = {name: step_loop(step, batch, steps) for name, step in steps_by_name.items()}
    for run in runs.values():
        run()
    return rotated_medians(runs, repetitions)


def report(name: str, value: float | int | str) -> None:
    """Prints one `name: value` line (the harness collects these)."""
    if isinstance(value, float):
        value = f"{value:.6g}"
    print(f"{name}: {value}", flush=True)
