"""Where a recorded call's time goes: each recorder part's ops, and the floor any host-picked logger pays.

Issue 34's ratios move by less than their noise when a cut saves tens of
microseconds a recorded call, so this bench splits the call instead. For the
README custom loop at 256 units (the worst `overhead_vs_hand_logger` case) and
the DDPG recipe (`bench.user_steps`), under TensorFlow's profiler
(`tf.profiler.experimental`), TF on one thread:

  - `<group>_<part>_us`: the microseconds per recorded call of the ops the
    recorder builds under `tb_gradscope/<part>/` (`record/_op_scope.py`),
    summed from the profiler's per-op events (the profiler adds about a
    microsecond to each op, so small ops read high);
  - `<group>_recorded_us`, `<group>_plain_us`: a whole call of each variant
    (TF's `KernelAndDeviceFunc::Run`), the recorded one back to back;
  - `<group>_copy_every_10_ratio` (not profiled): the plain step with a second
    `tf.function` of the same step run at every 10th call instead of the
    first, against the plain step alone (process CPU time, interleaved
    rounds). What a variant picked on the host costs before it records
    anything: the floor of `rec.function` and of the hand logger alike.

    python -m bench.bench_parts --quick
    python -m bench.bench_parts

Headline: `parts_readme256_recording_us`, the parts' sum on the README step.
"""

from __future__ import annotations

import collections
import glob
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from bench import bench_ops, user_steps  # noqa: E402
from bench.harness import median_ratio, parse_args, report, rotated_samples  # noqa: E402
from bench.tf_steps import single_thread  # noqa: E402
from tb_gradscope.record._op_scope import OP_SCOPE  # noqa: E402
from tb_gradscope.record._step_function import PLAIN, RECORDED  # noqa: E402

# The profiler writes an XSpace proto; TensorFlow ships its Python module here
# (not public API: a bench-only reader, which says so when it moves).
try:
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: E402
except ImportError as e:  # pragma: no cover - depends on the TF release
    raise SystemExit(f"bench_parts needs TensorFlow's XSpace proto module: {e}") from e

UNITS = 256
FUNCTION_RUN = "KernelAndDeviceFunc::Run"


def _readme(logdir: str):
    """The README step at UNITS units, as `bench_ops` builds it at 16."""
    return bench_ops._readme(logdir, UNITS)


def profile(function, batch: tuple, calls: int) -> collections.Counter:
    """Picoseconds per event name of `calls` calls of `function`, under the profiler."""
    with tempfile.TemporaryDirectory() as where:
        tf.profiler.experimental.start(where)
        for _ in range(calls):
            function(*batch)
        tf.profiler.experimental.stop()
        (path,) = glob.glob(os.path.join(where, "**", "*.xplane.pb"), recursive=True)
        space = xplane_pb2.XSpace()
        with open(path, "rb") as f:
            space.ParseFromString(f.read())
    spent: collections.Counter = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                spent[plane.event_metadata[event.metadata_id].name] += event.duration_ps
    return spent


def part_of(event: str) -> str | None:
    """The recorder part an op event (`scope/name:OpType`) belongs to, or None."""
    name = event.partition(":")[0]
    if ":" not in event or not name.startswith(OP_SCOPE + "/"):
        return None
    return bench_ops._part(name)


def copy_ratio(plain_fn, batch: tuple, steps: int, rounds: int) -> float:
    """Median over rounds of (plain, with a copy at every 10th call) / plain alone, CPU time."""
    plain, copy = tf.function(plain_fn), tf.function(plain_fn)

    def alone() -> None:
        for _ in range(steps):
            plain(*batch)

    def with_copy() -> None:
        for i in range(steps):
            (copy if i % user_steps.EVERY == 0 else plain)(*batch)

    runs = {"alone": alone, "with_copy": with_copy}
    for run in runs.values():
        run()  # traced and warm
    _, cpu = rotated_samples(runs, rounds)
    return median_ratio(cpu, "with_copy", "alone")


def measure(group: str, build, logdir: str, calls: int, steps: int, rounds: int) -> None:
    """Reports `group`'s lines, the parts' sum (us per recorded call) last."""
    rec, plain, step, batch = build(os.path.join(logdir, group))
    wrapped = rec.function(step)
    wrapped(*batch)  # traces the recorded variant, as a first call does
    variants = wrapped._variants  # noqa: SLF001 - each variant on its own
    whole, parts = {}, collections.Counter()
    for mode in (PLAIN, RECORDED):
        for _ in range(10):  # traced and warm
            variants[mode](*batch)
        spent = profile(variants[mode], batch, calls)
        whole[mode] = spent[FUNCTION_RUN] / calls / 1e6
        if mode == RECORDED:
            for event, ps in spent.items():
                if (part := part_of(event)) is not None:
                    parts[part] += ps / calls / 1e6
    for part in bench_ops.PARTS:
        report(f"parts_{group}_{part}_us", parts[part])
    report(f"parts_{group}_plain_us", whole[PLAIN])
    report(f"parts_{group}_recorded_us", whole[RECORDED])
    report(f"parts_{group}_copy_every_10_ratio", copy_ratio(plain, batch, steps, rounds))
    rec.close()
    report(f"parts_{group}_recording_us", sum(parts.values()))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    single_thread()
    calls, steps, rounds = (50, 200, 5) if args.quick else (300, 1000, 21)
    with tempfile.TemporaryDirectory() as logdir:
        measure("ddpg", bench_ops._ddpg, logdir, calls, steps, rounds)
        measure("readme256", _readme, logdir, calls, steps, rounds)  # last: the headline


if __name__ == "__main__":
    main()
