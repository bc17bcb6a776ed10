"""How recording cost grows: with the number of variables, of losses and the scope depth.

A synthetic model of N small variables (shape [16], each its own leaf scope
under a root `m`, in groups of 10: `m/g<k>/v<i>`) is trained by a
tf.function step; the recorded step (way 2, every step, so the cost is the
recorded cost) runs round-robin against the same step without the recorder
(CPU time, TF on one thread, medians of rotated repetitions; see
bench_overhead). Trace time (first call) is measured apart from step time, in
two parts: building the graph in Python (`get_concrete_function`) and the
first run (TF instantiates the function: grappler, then the executor).

  - variables: N = 10, 100, 1000 (--quick), 3000 and 10000 (full), one loss;
  - losses: 1, 2, 4, 8 over 100 variables (20 in --quick; each loss reaches
    every variable);
  - scope depth: 1, 4, 8 levels above the same variables.

Per axis: the extra CPU ms per step (recorded - baseline), the extra per
unit, and the log-log slope of the extra cost against the axis (1 = linear,
2 = quadratic); `<axis>_quadratic` is 1 if the slope exceeds 1.5. For the
variables axis also the traces' log-log slopes and
`recorded_trace_over_plain_<N>` (recorded trace CPU / plain trace CPU, first
call) at 1000 and 10000 variables; in full mode and with --variables, from
1000 variables on, also the first call of the step as `rec.function`
(`vars<N>_trace_rec_function_over_plain`: its recorded variant builds no
`tf.cond`, whose captures and outputs, one or two per variable, are what is
left of the one-trace step's wide ops).

    python -m bench.bench_scaling --quick   # < 60 s
    python -m bench.bench_scaling           # full: ~25 min of CPU, most of it the 10,000-variable
                                            # point (TF's first run of a 10k-variable step)
    python -m bench.bench_scaling --variables 10000   # that point alone (~20 min of CPU)

Each trace is reported as soon as it ends, so a run stopped by a timeout
still says how long the plain trace took.

Headline: variables_loglog_slope.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench.harness import (
    report,  # noqa: E402
    rotated_medians,  # noqa: E402
)
from bench.tf_steps import single_thread  # noqa: E402
from tb_gradscope.record import Recorder  # noqa: E402

WIDTH = 16
GROUP = 10


def make_variables(n: int, depth: int = 1) -> list[tf.Variable]:
    """n variables `m/<depth levels>/v<i>`; the last level groups them by 10."""
    rng = np.random.default_rng(n + depth)
    out = []
    for i in range(n):
        levels = [f"d{k}_{(i // GROUP) % (k + 2)}" for k in range(depth - 1)] + [f"g{i // GROUP}"]
        name = "/".join(["m"] + levels + [f"v{i}"])
        out.append(tf.Variable(rng.normal(size=WIDTH).astype(np.float32), name=name))
    return out


def make_losses(variables, n_losses: int):
    x = tf.constant(np.linspace(-1, 1, WIDTH, dtype=np.float32))

    def losses():
        h = tf.add_n([v * x for v in variables])  # one forward sum over every variable
        return {f"loss{j}": tf.reduce_mean(tf.square(h - float(j))) for j in range(n_losses)}

    return losses


def steps_for(variables, losses, logdir):
    opt_a, opt_b = keras.optimizers.SGD(1e-3), keras.optimizers.SGD(1e-3)
    opt_a.build(variables)
    opt_b.build(variables)
    rec = Recorder(logdir=logdir, every_n_steps=1, variables=variables)

    @tf.function
    def baseline():
        with tf.GradientTape() as tape:
            loss = tf.add_n(list(losses().values()))
        opt_a.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    @tf.function
    def recorded():
        with rec.tape() as tape:
            named = losses()
        rec.apply(opt_b, rec.gradients(tape, named, variables))
        return tf.add_n(list(named.values()))

    return baseline, recorded, rec


def wrapped_for(variables, losses, logdir):
    """The recorded step as `rec.function` (no `tf.cond`: its recorded variant
    knows it records), every step recorded."""
    opt = keras.optimizers.SGD(1e-3)
    opt.build(variables)
    rec = Recorder(logdir=logdir, every_n_steps=1, variables=variables)

    def step():
        with rec.tape() as tape:
            named = losses()
        rec.apply(opt, rec.gradients(tape, named, variables))
        return tf.add_n(list(named.values()))

    return rec.function(step), rec


def point(label, variables, n_losses, steps, repetitions, logdir, wrapped=False):
    """Extra recorded CPU ms per step at one point; reports trace times too
    (with `wrapped`, also the first call of the step as `rec.function`)."""
    baseline, recorded, rec = steps_for(
        variables, make_losses(variables, n_losses), os.path.join(logdir, label)
    )
    traces, trace_cpu, build_cpu = {}, {}, {}
    for name, fn in (("baseline", baseline), ("recorded", recorded)):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn.get_concrete_function()
        build_cpu[name] = time.process_time() - start_cpu
        fn().numpy()
        traces[name] = time.perf_counter() - start
        trace_cpu[name] = time.process_time() - start_cpu
        report(f"{label}_trace_{name}_s", traces[name])
        report(f"{label}_trace_{name}_cpu_s", trace_cpu[name])
        # Python graph building, then TF's first run
        report(f"{label}_trace_{name}_build_cpu_s", build_cpu[name])
        report(f"{label}_trace_{name}_first_run_cpu_s", trace_cpu[name] - build_cpu[name])

    if wrapped:
        step, wrapped_rec = wrapped_for(
            variables, make_losses(variables, n_losses), os.path.join(logdir, label + "_rf")
        )
        start_cpu = time.process_time()
        step().numpy()
        trace_cpu["rec_function"] = time.process_time() - start_cpu
        wrapped_rec.close()
        report(f"{label}_trace_rec_function_cpu_s", trace_cpu["rec_function"])
        report(
            f"{label}_trace_rec_function_over_plain",
            trace_cpu["rec_function"] / trace_cpu["baseline"],
        )

    def loop(fn):
        def run():
            for _ in range(steps):
                out = fn()
            out.numpy()

        return run

    _, cpu = rotated_medians({"baseline": loop(baseline), "recorded": loop(recorded)}, repetitions)
    scopes = len(rec.layout.layout.scopes)
    rec.close()
    base_ms, rec_ms = 1000 * cpu["baseline"] / steps, 1000 * cpu["recorded"] / steps
    report(f"{label}_scopes", scopes)
    report(f"{label}_trace_recorded_over_plain", trace_cpu["recorded"] / trace_cpu["baseline"])
    report(f"{label}_max_rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    report(f"{label}_baseline_cpu_ms", base_ms)
    report(f"{label}_extra_cpu_ms", rec_ms - base_ms)
    report(f"{label}_ratio", rec_ms / base_ms)
    return max(rec_ms - base_ms, 1e-3), trace_cpu["recorded"], trace_cpu["baseline"]


def slope(xs, ys) -> float:
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def axis(name, xs, extras, unit):
    per = np.polyfit(xs, extras, 1)[0]  # least-squares ms per unit
    report(f"{name}_extra_cpu_us_per_{unit}", 1000 * per)
    report(f"{name}_quadratic", int(slope(xs, extras) > 1.5))
    report(f"{name}_loglog_slope", slope(xs, extras))


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a short run (< 60 s)")
    parser.add_argument(
        "--variables",
        type=int,
        metavar="N",
        help="only the variables axis' point at N variables (traces and steps)",
    )
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    single_thread()
    report("load_average_1m", os.getloadavg()[0])
    if args.variables is not None:
        if args.variables < 1:
            raise SystemExit(f"--variables must be at least 1, got {args.variables}")
        with tempfile.TemporaryDirectory() as logdir:
            n = args.variables
            point(
                f"vars{n}",
                make_variables(n),
                1,
                3 if n >= 1000 else 10,
                3 if n >= 3000 else 11,
                logdir,
                wrapped=True,
            )
        report("load_average_1m_end", os.getloadavg()[0])
        return
    sizes = (10, 100, 1000) if args.quick else (10, 100, 1000, 3000, 10000)
    reps = 5 if args.quick else 11
    base_vars = 20 if args.quick else 100  # for the losses and depth axes
    with tempfile.TemporaryDirectory() as logdir:
        # --quick: tracing dominates (the 1000-variable point's two traces take
        # ~10 s of CPU each), so the loss and depth axes keep three and two points.
        loss_counts = (1, 2, 4) if args.quick else (1, 2, 4, 8)
        extras = [
            point(f"losses{k}", make_variables(base_vars), k, 5, reps, logdir)[0]
            for k in loss_counts
        ]
        axis("losses", loss_counts, extras, "loss")
        depths = (1, 8) if args.quick else (1, 4, 8)
        extras = [
            point(f"depth{d}", make_variables(base_vars, d), 1, 5, reps, logdir)[0] for d in depths
        ]
        axis("depth", depths, extras, "level")
        found = [
            point(
                f"vars{n}",
                make_variables(n),
                1,
                3 if n >= 1000 else 10,
                reps if n < 3000 else 3,
                logdir,
                wrapped=not args.quick and n >= 1000,
            )
            for n in sizes
        ]
        report(
            "vars_trace_recorded_cpu_loglog_slope",
            slope(sizes, [max(t, 1e-3) for _, t, _ in found]),
        )
        report(
            "vars_trace_baseline_cpu_loglog_slope",
            slope(sizes, [max(t, 1e-3) for _, _, t in found]),
        )
        for n, (_, recorded_trace, plain_trace) in zip(sizes, found):
            if n in (1000, 10000):
                report(f"recorded_trace_over_plain_{n}", recorded_trace / plain_trace)
    report("load_average_1m_end", os.getloadavg()[0])
    axis("variables", sizes, [e for e, _, _ in found], "variable")


if __name__ == "__main__":
    main()
