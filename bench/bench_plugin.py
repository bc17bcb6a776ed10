"""Gradscope plugin latency and log size, in real TensorBoard processes.

A run of STEPS steps x 64 scopes x 3 losses (grad_stats per loss plus
update_stats) and one scalar tag, served by one `tensorboard` per backend
(--load_fast=true: Rust data server; false: Python multiplexer) with no
gradscope flags (reloads off while measuring). Within each process,
interleaved repetitions of:
  - the matrix route at a kept step (cache warm), and
  - a 1000-point downsampled cell series,
each against TensorBoard's own scalars route serving the run's scalar tag
(the baseline). Ratios are of medians; targets are <= 1.0. Also: event-file
bytes per recorded value relative to raw float32 (target <= 1.2).
Headline (last line): the worse backend's matrix / scalars ratio.
"""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import tempfile
import time
from urllib.parse import urlencode

from bench import harness
from tb_gradscope import format as fmt
from tests import plugin_fixtures as pf

SCOPES = [f"net{i // 8}/layer{i % 8}" for i in range(64)]
LOSSES = ["td", "aux", "entropy"]
RUN = "bench"
SCALAR_TAG = "loss/td"
API = "data/plugin/gradscope/"


def write_logs(root: str, steps: int) -> float:
    """Writes the run; returns event-file bytes per recorded value / 4."""
    pf.write_bulk(root, RUN, steps, SCOPES, LOSSES)
    (tables_file,) = os.listdir(os.path.join(root, RUN))
    table_bytes = os.path.getsize(os.path.join(root, RUN, tables_file))
    pf.write_bulk(root, RUN, steps, SCOPES, LOSSES, scalar_tag=SCALAR_TAG, tables=False)
    columns = len(LOSSES) * len(fmt.KIND_SPECS[fmt.Kind.GRAD_STATS].columns) + len(
        fmt.KIND_SPECS[fmt.Kind.UPDATE_STATS].columns
    )
    values = steps * len(SCOPES) * columns
    return table_bytes / (values * 4)


def wait_loaded(server: pf.TensorBoardServer, steps: int, timeout: float) -> list[int]:
    """Polls the run route until the last step is in; returns the kept steps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _, body = server.get(API + "run?" + urlencode({"run": RUN}), timeout=timeout)
        if status == 200:
            kept = json.loads(body)["steps"]
            if kept and kept[-1] == steps - 1:
                return kept
        time.sleep(0.5)
    raise RuntimeError(f"TensorBoard did not load step {steps - 1} in {timeout}s")


def fetch(server: pf.TensorBoardServer, path: str) -> None:
    status, _, body = server.get(path)
    if status != 200:
        raise RuntimeError(f"{path}: {status} {body[:300]!r}")


def measure(server: pf.TensorBoardServer, kept: list[int], steps: int, repetitions: int) -> dict[str, float]:
    """Interleaved medians of the three routes in one TensorBoard process."""
    scalars = "data/plugin/scalars/scalars?" + urlencode({"run": RUN, "tag": SCALAR_TAG})
    status, _, body = server.get(scalars)
    baseline_points = len(json.loads(body)) if status == 200 else 0
    if baseline_points < min(steps, 1000):
        raise RuntimeError(f"scalars baseline has {baseline_points} points: {status} {body[:200]!r}")
    probe = [kept[(i * 7919) % len(kept)] for i in range(repetitions)]
    counter = iter(range(10**9))

    def matrix() -> None:
        fetch(server, API + "matrix?" + urlencode({"run": RUN, "step": probe[next(counter) % len(probe)]}))

    series_query = {"run": RUN, "kind": "grad_stats", "name": "aux", "scope": SCOPES[9], "stat": "l2", "points": 1000}

    def series() -> None:
        fetch(server, API + "series?" + urlencode(series_query))

    def baseline() -> None:
        fetch(server, scalars)

    for warm in (matrix, series, baseline):
        warm()
    medians = harness.interleaved_medians(
        {"matrix": matrix, "series": series, "scalars": baseline}, repetitions
    )
    return {
        "kept_steps": len(kept),
        "scalars_points": baseline_points,
        "matrix_ms": medians["matrix"] * 1e3,
        "series_ms": medians["series"] * 1e3,
        "scalars_ms": medians["scalars"] * 1e3,
        "matrix_vs_scalars": medians["matrix"] / medians["scalars"],
        "series_vs_scalars": medians["series"] / medians["scalars"],
    }


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    steps = 2_000 if args.quick else 100_000
    repetitions = 10 if args.quick else 60
    root = tempfile.mkdtemp(prefix="bench_plugin_")
    try:
        bytes_ratio = write_logs(root, steps)
        harness.report("steps", steps)
        harness.report("scopes", len(SCOPES))
        harness.report("losses", len(LOSSES))
        # Both processes start together (each takes ~10 s to import); they are
        # measured one after the other. No reloads: the logs are complete, and
        # a reload would compete with the routes for the CPU.
        servers = {
            backend: pf.TensorBoardServer(root, flag, "--reload_interval", "600")
            for backend, flag in (("rust", "true"), ("python", "false"))
        }
        with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
            list(pool.map(lambda server: server.start(), servers.values()))
            try:
                # Both loaded before timing either: a loading backend would
                # steal CPU from the one being measured.
                kept = {backend: wait_loaded(server, steps, timeout=1800) for backend, server in servers.items()}
                results = {
                    backend: measure(server, kept[backend], steps, repetitions)
                    for backend, server in servers.items()
                }
            finally:
                list(pool.map(lambda server: server.stop(), servers.values()))
        for backend, values in results.items():
            for name, value in values.items():
                harness.report(f"{backend}_{name}", value)
        harness.report("series_vs_scalars", max(v["series_vs_scalars"] for v in results.values()))
        harness.report("bytes_per_value_vs_float32", bytes_ratio)
        harness.report("matrix_vs_scalars", max(v["matrix_vs_scalars"] for v in results.values()))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
