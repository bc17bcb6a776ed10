"""Recorder memory: persistent state against the number of scopes, transient peak against parameters.

Persistent state (what a Recorder keeps between steps), for 10..N scopes
(synthetic variables `m/g<k>/v<i>`, one leaf scope per 10 variables), counted,
not sampled:
  - `tf_bytes`: bytes of the tf.Variables the recorder owns (rec.variables);
  - `python_bytes`: deep sys.getsizeof of the recorder's Python-side objects
    (layout, emitter, tag tables), stopping at TensorFlow objects (variables,
    tensors, graphs, functions) which belong to the model or the trace;
  - `growth_bytes`: tracemalloc's net growth over 50 further recorded steps
    (a buffer that grows with steps would show here; 0 is the target).
The fitted bytes per scope and the log-log slope say whether it is O(scopes).

Transient peak at a recorded step (on CPU; tf.config.experimental.get_memory_info
is GPU-only): ||delta theta|| needs a copy of the variables handed to apply,
taken only at recorded steps, so the analytic extra is 4 bytes per float32
parameter. Empirically: fresh processes (MLP width x 4 layers) trace the same
recorded step, then run 10 steps either recording every step or never; the
peak RSS (VmHWM) above the RSS after tracing is compared, recorded minus
unrecorded, alternating which runs first, medians. (Within one process TF's
allocator reuses freed blocks, so the high-water mark of a warm process does
not move: that measure read 0 here.)

    python -m bench.bench_memory --quick   # < 60 s
    python -m bench.bench_memory           # full

Headline: persistent_bytes_per_scope (at the largest scope count).
"""

from __future__ import annotations

import gc
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import tracemalloc
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench.bench_scaling import make_losses, make_variables  # noqa: E402
from bench.harness import parse_args, report  # noqa: E402
from bench.tf_steps import single_thread  # noqa: E402
from tb_gradscope.record import Recorder  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
_TF_TYPES = (
    tf.Variable,
    tf.Tensor,
    tf.Graph,
    tf.Operation,
    tf.Module,
    keras.layers.Layer,
    tf.types.experimental.GenericFunction,
    types.FunctionType,
    types.MethodType,
    types.ModuleType,
    type,
)


def python_bytes(root) -> int:
    """Deep getsizeof of plain Python objects under `root`, not entering TF objects."""
    seen, total, stack = set(), 0, [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if obj is not root and isinstance(obj, _TF_TYPES):
            continue
        if type(obj).__module__.startswith(("tensorflow", "keras", "absl", "google")):
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        else:
            if hasattr(obj, "__dict__"):
                stack.append(vars(obj))
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
    return total


def recorded_step(variables, n_losses, logdir, every=1):
    losses = make_losses(variables, n_losses)
    opt = keras.optimizers.SGD(1e-3)
    opt.build(variables)
    rec = Recorder(logdir=logdir, every_n_steps=every, variables=variables)

    @tf.function
    def step():
        with rec.tape() as tape:
            named = losses()
        rec.apply(opt, rec.gradients(tape, named, variables))
        return tf.add_n(list(named.values()))

    return step, rec


def persistent(n_vars: int, logdir: str):
    variables = make_variables(n_vars)
    step, rec = recorded_step(variables, 1, os.path.join(logdir, f"p{n_vars}"))
    step().numpy()  # trace: the layout is built at the first recorded step
    scopes = len(rec.layout.layout.scopes)
    tf_bytes = sum(v.dtype.size * int(np.prod(v.shape)) for v in rec.variables)
    py_bytes = python_bytes(rec._s)  # the recorder's whole non-TF state object
    for _ in range(5):
        step()
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(50):
        step()
    step().numpy()
    gc.collect()
    growth = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    rec.close()
    report(f"scopes{scopes}_tf_bytes", tf_bytes)
    report(f"scopes{scopes}_python_bytes", py_bytes)
    report(f"scopes{scopes}_growth_bytes_50_steps", growth)
    return scopes, tf_bytes + py_bytes


def _status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(width: int, recorded: bool, steps: int = 10) -> None:
    """In a fresh process: peak RSS over `steps` steps above the RSS after tracing.

    Both modes trace the same step; `recorded` records every step, the other
    never (every_n_steps far away, step counter off the recorded residue).
    """
    single_thread()
    inputs = keras.Input((width,))
    h = inputs
    for i in range(4):
        h = keras.layers.Dense(width, activation="relu", name=f"l{i}")(h)
    model = keras.Model(inputs, h, name="mlp")
    variables = model.trainable_variables
    x = tf.constant(np.random.default_rng(0).normal(size=(8, width)).astype(np.float32))
    opt = keras.optimizers.SGD(1e-3)
    opt.build(variables)
    with tempfile.TemporaryDirectory() as logdir:
        rec = Recorder(logdir=logdir, every_n_steps=1 if recorded else 10**9, models={"mlp": model})

        @tf.function
        def step():
            with rec.tape() as tape:
                named = {"l2": tf.reduce_mean(tf.square(model(x)))}
            rec.apply(opt, rec.gradients(tape, named, variables))
            return named["l2"]

        rec.step.assign(0 if recorded else 1)
        step.get_concrete_function()  # trace without running
        gc.collect()
        rss = _status("VmRSS")
        for _ in range(steps):
            step().numpy()
        print(f"peak_extra_bytes: {_status('VmHWM') - rss}")
        print(f"params: {sum(int(np.prod(v.shape)) for v in variables)}")
        rec.close()


def transient(width: int, repetitions: int):
    """Median peak-RSS extra of recorded minus unrecorded fresh processes (alternated)."""
    extras = {True: [], False: []}
    params = None
    for rep in range(repetitions):
        for recorded in (True, False) if rep % 2 == 0 else (False, True):
            env = dict(
                os.environ, BENCH_MEMORY_CHILD=f"{width},{int(recorded)}", TF_CPP_MIN_LOG_LEVEL="3"
            )
            out = subprocess.run(
                [sys.executable, "-m", "bench.bench_memory"],
                env=env,
                cwd=ROOT,
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            values = dict(line.split(": ") for line in out.splitlines() if ": " in line)
            extras[recorded].append(int(values["peak_extra_bytes"]))
            params = int(values["params"])
    rec_b, unrec_b = statistics.median(extras[True]), statistics.median(extras[False])
    report(f"params{params}_analytic_copy_bytes", 4 * params)
    report(f"params{params}_rss_peak_recorded_bytes", rec_b)
    report(f"params{params}_rss_peak_unrecorded_bytes", unrec_b)
    report(f"params{params}_rss_extra_bytes", rec_b - unrec_b)
    report(f"params{params}_rss_extra_over_analytic", (rec_b - unrec_b) / (4 * params))
    return params, rec_b - unrec_b


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    single_thread()
    report("load_average_1m", os.getloadavg()[0])
    # Tracing a recorded step costs ~30 s of CPU per 1000 variables: --quick stays small.
    var_counts = (50, 200, 500) if args.quick else (100, 1000, 3000)
    widths = (1024, 2048) if args.quick else (512, 1024, 2048, 3072)
    found = [transient(width, 1 if args.quick else 3) for width in widths]
    report(
        "transient_rss_extra_per_param_bytes",
        float(np.polyfit([p for p, _ in found], [e for _, e in found], 1)[0]),
    )
    with tempfile.TemporaryDirectory() as logdir:
        points = [persistent(n, logdir) for n in var_counts]
    scopes = [s for s, _ in points]
    sizes = [b for _, b in points]
    report("persistent_loglog_slope", float(np.polyfit(np.log(scopes), np.log(sizes), 1)[0]))
    report("persistent_fit_bytes_per_scope", float(np.polyfit(scopes, sizes, 1)[0]))
    report("load_average_1m_end", os.getloadavg()[0])
    report("persistent_bytes_per_scope", sizes[-1] / scopes[-1])


if __name__ == "__main__":
    if os.environ.get("BENCH_MEMORY_CHILD"):
        width, recorded = os.environ["BENCH_MEMORY_CHILD"].split(",")
        child(int(width), recorded == "1")
    else:
        main()
