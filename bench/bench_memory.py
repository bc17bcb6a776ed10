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
parameter. Empirically: the kernel's peak-RSS mark (VmHWM) is reset through
/proc/self/clear_refs before each step, and the peak minus the RSS before the
step is taken for a recorded and an unrecorded step of the same recorder (its
step counter set to a recorded / unrecorded value), interleaved, medians.
TF's CPU allocator reuses freed blocks, so the RSS figure can under-report;
both are printed.

    python -m bench.bench_memory --quick   # < 60 s
    python -m bench.bench_memory           # full

Headline: persistent_bytes_per_scope (at the largest scope count).
"""

from __future__ import annotations

import gc
import os
import statistics
import sys
import tempfile
import tracemalloc
import types

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench.bench_overhead import single_thread  # noqa: E402
from bench.bench_scaling import GROUP, make_losses, make_variables  # noqa: E402
from bench.harness import parse_args, report  # noqa: E402
from tb_gradscope.record import Recorder  # noqa: E402

_TF_TYPES = (tf.Variable, tf.Tensor, tf.Graph, tf.Operation, tf.Module, keras.layers.Layer,
             tf.types.experimental.GenericFunction, types.FunctionType, types.MethodType,
             types.ModuleType, type)


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


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def transient(width: int, repetitions: int, logdir: str):
    """Peak RSS over one step minus RSS before it, recorded vs not; MLP width x width x 4 layers."""
    inputs = keras.Input((width,))
    h = inputs
    for i in range(4):
        h = keras.layers.Dense(width, activation="relu", name=f"l{i}")(h)
    model = keras.Model(inputs, h, name=f"mlp{width}")
    variables = model.trainable_variables
    params = sum(int(np.prod(v.shape)) for v in variables)
    x = tf.constant(np.random.default_rng(0).normal(size=(8, width)).astype(np.float32))
    opt = keras.optimizers.SGD(1e-3)
    opt.build(variables)
    rec = Recorder(logdir=os.path.join(logdir, f"t{width}"), every_n_steps=2, models={"mlp": model})

    @tf.function
    def step():
        with rec.tape() as tape:
            named = {"l2": tf.reduce_mean(tf.square(model(x)))}
        rec.apply(opt, rec.gradients(tape, named, variables))
        return named["l2"]

    for _ in range(4):
        step().numpy()
    deltas = {"recorded": [], "unrecorded": []}
    for rep in range(repetitions):
        order = ("recorded", "unrecorded") if rep % 2 == 0 else ("unrecorded", "recorded")
        for label in order:
            rec.step.assign(0 if label == "recorded" else 1)
            gc.collect()
            if not _reset_peak():
                return params, None
            rss = _status("VmRSS")
            step().numpy()
            deltas[label].append(_status("VmHWM") - rss)
    rec.close()
    med = {k: statistics.median(v) for k, v in deltas.items()}
    report(f"params{params}_analytic_copy_bytes", 4 * params)
    report(f"params{params}_rss_peak_recorded_bytes", med["recorded"])
    report(f"params{params}_rss_peak_unrecorded_bytes", med["unrecorded"])
    report(f"params{params}_rss_extra_bytes", med["recorded"] - med["unrecorded"])
    return params, med["recorded"] - med["unrecorded"]


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    single_thread()
    report("load_average_1m", os.getloadavg()[0])
    var_counts = (100, 1000, 5000) if args.quick else (100, 1000, 10000, 30000)
    widths = (256, 1024) if args.quick else (256, 1024, 2048)
    with tempfile.TemporaryDirectory() as logdir:
        found = []
        for width in widths:
            params, extra = transient(width, 7 if args.quick else 21, logdir)
            if extra is not None:
                found.append((params, extra))
        if found:
            report("transient_rss_extra_per_param_bytes",
                   float(np.polyfit([p for p, _ in found], [e for _, e in found], 1)[0]))
        else:
            report("transient_rss_extra_per_param_bytes", "unavailable (no /proc/self/clear_refs)")
        points = [persistent(n, logdir) for n in var_counts]
    scopes = [s for s, _ in points]
    sizes = [b for _, b in points]
    report("persistent_loglog_slope", float(np.polyfit(np.log(scopes), np.log(sizes), 1)[0]))
    report("persistent_fit_bytes_per_scope", float(np.polyfit(scopes, sizes, 1)[0]))
    report("load_average_1m_end", os.getloadavg()[0])
    report("persistent_bytes_per_scope", sizes[-1] / scopes[-1])


if __name__ == "__main__":
    main()
