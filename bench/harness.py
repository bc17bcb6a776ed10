"""Shared bench plumbing: interleaved repetitions, medians, `name: value` output.

Every benchmark compares against a baseline measured in the same process,
alternating the two so that machine noise hits both alike, and reports the
ratio of medians.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable


def parse_args(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="a short run (< 60 s)")
    return parser.parse_args()


def interleaved_medians(
    candidates: dict[str, Callable[[], object]], repetitions: int
) -> dict[str, float]:
    """Median wall time (s) of each callable, run round-robin `repetitions` times."""
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(repetitions):
        for name, fn in candidates.items():
            start = time.perf_counter()
            fn()
            samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def report(name: str, value: float | int | str) -> None:
    """Prints one `name: value` line (the harness collects these)."""
    if isinstance(value, float):
        value = f"{value:.6g}"
    print(f"{name}: {value}", flush=True)
