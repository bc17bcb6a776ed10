"""Gradscope plugin latency and log size, in real TensorBoard processes.

One logdir holds one run per size (1k and 10k steps in --quick; 1k, 10k and
100k in full mode), each of 64 scopes x 3 losses (grad_stats per loss plus
update_stats) and one scalar tag. It is served by one `tensorboard` per backend
(--load_fast=true: Rust data server; false: Python multiplexer) with default
retention and reloads off while measuring. Within each process and run,
interleaved repetitions of:
  - the matrix route at a kept step (one step's tables: 64 scopes x 3 losses
    plus the update columns; cache warm), and
  - a cell's series route, downsampled to 1000 points,
each against TensorBoard's own scalars route serving the run's scalar tag (the
baseline: every point it keeps, at most 1000 by default). What each route
returns (points, response bytes) is printed with the figures.

Retention at 100k steps: gradscope keeps 10000 steps per series (the default
of --gradscope_samples), TensorBoard's scalars 1000, so both the series route
and the scalars route answer with 1000 points.

Ratios are of medians (targets <= 1.0); means are printed too, since they
include what a median hides (the plugin's once-a-second listing refresh).

Opening a run with events (issue 24): a run of 2000 recorded steps, each with
two violations (two blobs per step, 4000 blobs) and the grad_stats tables of
two losses, is loaded by both processes before anything is timed; then its
first `run` request (cold cache: every table and blob read) is timed once per
backend (target: <= 5 s on the Rust backend, whose data server answers one
blob per call).
Also: event-file bytes per recorded value relative to raw float32 (target
<= 1.2). Headline (last line): the worst matrix / scalars ratio over sizes
and backends.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import json
import os
import shutil
import statistics
import tempfile
import time
from urllib.parse import urlencode

from bench import harness
from tb_gradscope import format as fmt
from tests.support import plugin_fixtures as pf

SCOPES = [f"net{i // 8}/layer{i % 8}" for i in range(64)]
LOSSES = ["td", "aux", "entropy"]
SCALAR_TAG = "loss/td"
API = "data/plugin/gradscope/"
SERIES_POINTS = 1000  # what TensorBoard's scalars route keeps per tag by default
QUICK_SIZES = (1_000, 10_000)
FULL_SIZES = (1_000, 10_000, 100_000)
BACKENDS = {"rust": "true", "python": "false"}
EVENTS_RUN = "events2k"
EVENTS_STEPS = 2000
EVENTS_PER_STEP = 2
OPEN_TARGET_S = 5.0


def label(steps: int) -> str:
    """`1000` -> `1k`: the size part of the printed names (and the run's name)."""
    return f"{steps // 1000}k" if steps % 1000 == 0 else str(steps)


def write_logs(root: str, steps: int) -> float:
    """Writes the run of `steps` steps; returns event-file bytes per recorded value / 4."""
    run = label(steps)
    pf.write_bulk(root, run, steps, SCOPES, LOSSES)
    (tables_file,) = os.listdir(os.path.join(root, run))
    table_bytes = os.path.getsize(os.path.join(root, run, tables_file))
    pf.write_bulk(root, run, steps, SCOPES, LOSSES, scalar_tag=SCALAR_TAG, tables=False)
    columns = len(LOSSES) * len(fmt.KIND_SPECS[fmt.Kind.GRAD_STATS].columns) + len(
        fmt.KIND_SPECS[fmt.Kind.UPDATE_STATS].columns
    )
    values = steps * len(SCOPES) * columns
    return table_bytes / (values * 4)


def write_events_run(root: str, steps: int = EVENTS_STEPS, scopes: list[str] = SCOPES[:16]) -> None:
    """A run whose every step holds EVENTS_PER_STEP violations (one blob
    each) and two losses' grad_stats, plus a scalar tag written last at each
    step (its last point says the run is loaded), by a compiled loop."""
    import tensorflow as tf

    infos = [fmt.make_info(fmt.Kind.GRAD_STATS, loss, scopes) for loss in LOSSES[:2]]
    events = fmt.make_info(fmt.Kind.EVENTS, "step")
    writer = tf.summary.create_file_writer(
        os.path.join(root, EVENTS_RUN), max_queue=100_000, flush_millis=600_000
    )
    scalar_meta = pf.scalar_metadata.create_summary_metadata("", "").SerializeToString()

    def documents(step):
        text = tf.strings.as_string(step)
        return tf.stack(
            [
                tf.strings.join(
                    [
                        '{"evidence": {"l2": 0.5}, "loss": "td", "message": "loss \'td\' reaches scope \'',
                        scopes[i],
                        "' at step ",
                        text,
                        '", "name": "never(td, target/*)", "pair": "", "scope": "',
                        scopes[i],
                        '", "step": ',
                        text,
                        ', "type": "violation"}',
                    ]
                )
                for i in range(EVENTS_PER_STEP)
            ]
        )

    def write_step(step, metadata: bool):
        for k, info in enumerate(infos):
            meta = fmt.create_summary_metadata(info).SerializeToString() if metadata else b""
            table = tf.random.stateless_uniform(
                [len(scopes), len(info.columns)], seed=tf.stack([step, k])
            )
            tf.summary.write(
                fmt.tag_for(info.kind, info.name), table + 0.5, step=step, metadata=meta
            )
        meta = fmt.create_summary_metadata(events).SerializeToString() if metadata else b""
        tf.summary.write(
            fmt.tag_for(events.kind, events.name), documents(step), step=step, metadata=meta
        )
        tf.summary.write(SCALAR_TAG, tf.cast(step, tf.float32), step=step, metadata=scalar_meta)

    @tf.function
    def write_steps(count):
        for step in tf.range(1, count, dtype=tf.int64):
            write_step(step, metadata=False)

    with writer.as_default():
        write_step(tf.constant(0, tf.int64), metadata=True)
        write_steps(tf.constant(steps, tf.int64))
    writer.close()


def wait_scalar(server: pf.TensorBoardServer, run: str, last_step: int, timeout: float) -> None:
    """Polls TensorBoard's scalars route (not the plugin's, whose cache must
    stay cold) until `run`'s scalar reaches `last_step`."""
    path = "data/plugin/scalars/scalars?" + urlencode({"run": run, "tag": SCALAR_TAG})
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _, body = server.get(path, timeout=timeout)
        if status == 200 and json.loads(body) and json.loads(body)[-1][1] == last_step:
            return
        time.sleep(0.5)
    raise RuntimeError(f"TensorBoard did not load step {last_step} of {run} in {timeout}s")


def first_open(server: pf.TensorBoardServer, run: str) -> tuple[float, dict]:
    """Seconds of the first `run` request of `run` (cold cache) and its body."""
    start = time.perf_counter()
    body = json.loads(fetch(server, API + "run?" + urlencode({"run": run})))
    return time.perf_counter() - start, body


def wait_loaded(server: pf.TensorBoardServer, run: str, steps: int, timeout: float) -> list[int]:
    """Polls the run route until the run's last step is in; returns the kept steps."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, _, body = server.get(API + "run?" + urlencode({"run": run}), timeout=timeout)
        if status == 200:
            kept = json.loads(body)["steps"]
            if kept and kept[-1] == steps - 1:
                return kept
        time.sleep(0.5)
    raise RuntimeError(f"TensorBoard did not load step {steps - 1} of {run} in {timeout}s")


def fetch(server: pf.TensorBoardServer, path: str) -> bytes:
    """The body of a GET that must succeed."""
    status, _, body = server.get(path)
    if status != 200:
        raise RuntimeError(f"{path}: {status} {body[:300]!r}")
    return body


def measure(
    server: pf.TensorBoardServer, run: str, kept: list[int], steps: int, repetitions: int
) -> dict[str, float]:
    """Interleaved timings of the three routes on one run of one TensorBoard process."""
    scalars = "data/plugin/scalars/scalars?" + urlencode({"run": run, "tag": SCALAR_TAG})
    series = (
        API
        + "series?"
        + urlencode(
            {
                "run": run,
                "kind": "grad_stats",
                "name": "aux",
                "scope": SCOPES[9],
                "stat": "l2",
                "points": SERIES_POINTS,
            }
        )
    )
    probe = [kept[(i * 7919) % len(kept)] for i in range(repetitions)]
    matrices = itertools.cycle(
        [API + "matrix?" + urlencode({"run": run, "step": step}) for step in probe]
    )
    # The first calls warm the plugin's cache and tell what each route returns.
    scalars_body, series_body, matrix_body = (
        fetch(server, scalars),
        fetch(server, series),
        fetch(server, next(matrices)),
    )
    scalars_points = len(json.loads(scalars_body))
    if scalars_points < min(steps, SERIES_POINTS):
        raise RuntimeError(
            f"the scalars baseline has {scalars_points} points: {scalars_body[:200]!r}"
        )
    samples = harness.interleaved_samples(
        {
            "matrix": lambda: fetch(server, next(matrices)),
            "series": lambda: fetch(server, series),
            "scalars": lambda: fetch(server, scalars),
        },
        repetitions,
    )
    medians = {name: statistics.median(times) for name, times in samples.items()}
    figures: dict[str, float] = {
        "kept_steps": len(kept),
        "scalars_points": scalars_points,
        "series_points": len(json.loads(series_body)["points"]),
        "matrix_bytes": len(matrix_body),
        "series_bytes": len(series_body),
        "scalars_bytes": len(scalars_body),
    }
    for name, times in samples.items():
        figures[f"{name}_ms"] = medians[name] * 1e3
        figures[f"{name}_mean_ms"] = statistics.fmean(times) * 1e3
    figures["matrix_vs_scalars"] = medians["matrix"] / medians["scalars"]
    figures["series_vs_scalars"] = medians["series"] / medians["scalars"]
    return figures


def measure_backends(
    root: str, sizes: tuple[int, ...], repetitions: int
) -> dict[str, dict[str, float]]:
    """{"<backend>_<size>": figures} from one TensorBoard process per backend."""
    # Both processes start together (each takes seconds to import); they are
    # measured one after the other. No reloads: the logs are complete, and a
    # reload would compete with the routes for the CPU.
    servers = {
        backend: pf.TensorBoardServer(root, flag, "--reload_interval", "600")
        for backend, flag in BACKENDS.items()
    }
    with concurrent.futures.ThreadPoolExecutor(len(servers)) as pool:
        list(pool.map(lambda server: server.start(), servers.values()))
        try:
            # Every run loaded in both before timing any: a loading backend
            # would steal CPU from the one being measured.
            kept = {
                (backend, steps): wait_loaded(server, label(steps), steps, timeout=1800)
                for backend, server in servers.items()
                for steps in sizes
            }
            for server in servers.values():
                wait_scalar(server, EVENTS_RUN, EVENTS_STEPS - 1, timeout=1800)
            results = {}
            for backend, server in servers.items():
                seconds, body = first_open(server, EVENTS_RUN)
                if (
                    len(body["steps"]) != EVENTS_STEPS
                    or body["event_count"] < EVENTS_STEPS * EVENTS_PER_STEP
                ):
                    raise RuntimeError(
                        f"{backend}: {EVENTS_RUN} opened with {len(body['steps'])} steps, "
                        f"{body['event_count']} events: {body['warnings'][:3]}"
                    )
                results[f"{backend}_{EVENTS_RUN}"] = {
                    "first_run_s": seconds,
                    "events": body["event_count"],
                }
            results.update(
                {
                    f"{backend}_{label(steps)}": measure(
                        servers[backend], label(steps), kept[backend, steps], steps, repetitions
                    )
                    for backend, steps in kept
                }
            )
            return results
        finally:
            list(pool.map(lambda server: server.stop(), servers.values()))


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    sizes = QUICK_SIZES if args.quick else FULL_SIZES
    repetitions = 20 if args.quick else 60
    root = tempfile.mkdtemp(prefix="bench_plugin_")
    try:
        bytes_ratios = {steps: write_logs(root, steps) for steps in sizes}
        write_events_run(root)
        harness.report("sizes", " ".join(label(steps) for steps in sizes))
        harness.report("scopes", len(SCOPES))
        harness.report("losses", len(LOSSES))
        harness.report("repetitions", repetitions)
        results = measure_backends(root, sizes, repetitions)
        for prefix, figures in results.items():
            for name, value in figures.items():
                harness.report(f"{prefix}_{name}", value)
        for steps, ratio in bytes_ratios.items():
            harness.report(f"{label(steps)}_bytes_per_value_vs_float32", ratio)
        open_rust = results[f"rust_{EVENTS_RUN}"]["first_run_s"]
        open_python = results[f"python_{EVENTS_RUN}"]["first_run_s"]
        harness.report("events_first_run_rust_vs_python", open_rust / open_python)
        harness.report("events_first_run_rust_vs_target", open_rust / OPEN_TARGET_S)
        tables = {k: f for k, f in results.items() if "series_vs_scalars" in f}
        harness.report("series_vs_scalars", max(f["series_vs_scalars"] for f in tables.values()))
        harness.report("bytes_per_value_vs_float32", bytes_ratios[sizes[-1]])
        harness.report("matrix_vs_scalars", max(f["matrix_vs_scalars"] for f in tables.values()))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
