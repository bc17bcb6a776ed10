"""Cost of the TF1 integration on a DQN learn step (seed 01's shape).

All candidates drive one graph and one session, measured side by side
(interleaved call by call in rotating order; medians over blocks of 100
steps): the plain session (baseline of the wrapper), `GraphRecorder.wrap` at
the default `every_n_steps` (100), a MonitoredSession without hooks (baseline
of the hook) and with `GraphRecorder.hook()`. Also: recording every step (in
blocks against plain), the two small calls a recorded step adds (snapshot
before, update norms after), the wrapper's Python cost on an unrecorded call,
and the time to build a GraphRecorder on a deep MLP against the time
`minimize()` took on the same graph.
Headline: MonitoredSession step time with the hook at the default frequency /
without it.
"""

from __future__ import annotations

import statistics
import tempfile
import time

import numpy as np
import tensorflow.compat.v1 as tf

from bench import harness
from tb_gradscope.integrations.tf1 import GraphRecorder


def _dense(x, units, name, activation=None):
    with tf.variable_scope(name):
        w = tf.get_variable("w", [int(x.shape[-1]), units])
        b = tf.get_variable("b", [units], initializer=tf.zeros_initializer())
        y = tf.matmul(x, w) + b
    return activation(y) if activation else y


def _build(n_features: int, hidden: int, n_actions: int):
    """A DQN: eval_net trained on a stop_gradient TD target from target_net."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(0)
        s = tf.placeholder(tf.float32, [None, n_features], "s")
        s_ = tf.placeholder(tf.float32, [None, n_features], "s_")
        r = tf.placeholder(tf.float32, [None], "r")
        a = tf.placeholder(tf.int32, [None], "a")
        nets = {}
        for net, inputs in (("eval_net", s), ("target_net", s_)):
            with tf.variable_scope(net):
                h = _dense(inputs, hidden, "l1", tf.nn.relu)
                h = _dense(h, hidden, "l2", tf.nn.relu)
                nets[net] = _dense(h, n_actions, "q")
        q_target = tf.stop_gradient(r + 0.9 * tf.reduce_max(nets["target_net"], axis=1))
        q_eval = tf.gather_nd(nets["eval_net"], tf.stack([tf.range(tf.shape(a)[0]), a], 1))
        loss = tf.reduce_mean(tf.squared_difference(q_target, q_eval))
        train = tf.train.RMSPropOptimizer(1e-4).minimize(loss)
        init = tf.global_variables_initializer()
    return graph, (s, s_, r, a), loss, train, init


def _build_costs(layers: int, logdir: str) -> tuple[int, float, float]:
    """(variables, seconds to build minimize(), seconds to build a GraphRecorder)
    for a deep MLP: the recorder adds ops to the graph like the optimizer does."""
    graph = tf.Graph()
    with graph.as_default():
        h = tf.placeholder(tf.float32, [None, 16])
        for i in range(layers):
            with tf.variable_scope(f"block{i // 10}"):
                h = _dense(h, 16, f"layer{i}", tf.nn.relu)
        loss = tf.reduce_mean(tf.square(h))
        start = time.perf_counter()
        train = tf.train.AdamOptimizer(1e-3).minimize(loss)
        minimize = time.perf_counter() - start
        start = time.perf_counter()
        recorder = GraphRecorder(logdir, losses={"fit": loss}, train_ops={"fit": train})
        build = time.perf_counter() - start
        recorder.close()
    return len(recorder.variables), minimize, build


def _call_overhead(logdir: str, repetitions: int) -> float:
    """Seconds the wrapper adds to one unrecorded run call (a trivial graph)."""
    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder(tf.float32, [None, 2])
        loss = tf.reduce_mean(_dense(x, 1, "net"))
        train = tf.train.GradientDescentOptimizer(1e-6).minimize(loss)
        raw = tf.Session(graph=graph)
        recorder = GraphRecorder(
            logdir, losses={"fit": loss}, train_ops={"fit": train}, every_n_steps=10**9
        )
        raw.run(tf.global_variables_initializer())
    wrapped = recorder.wrap(raw)
    feed = {x: np.ones((2, 2), np.float32)}
    wrapped.run(train, feed)  # step 0 is recorded; every later call is not

    def calls(run):
        def go():
            for _ in range(100):
                run([train, loss], feed)

        return go

    medians = harness.interleaved_medians(
        {"raw": calls(raw.run), "wrapped": calls(wrapped.run)}, repetitions
    )
    wrapped.close()
    return (medians["wrapped"] - medians["raw"]) / 100


class _Existing(tf.train.SessionCreator):
    """Hands an existing session to MonitoredSession, so that sessions with and
    without the hook share one session (same thread pools, same variables)."""

    def __init__(self, session):
        self._session = session

    def create_session(self):
        return self._session


def _per_step(runs: dict, step, block: int, repetitions: int) -> dict[str, float]:
    """Seconds per step of each run function, interleaved call by call with the
    order rotated every call (load from other processes and cache state hit
    all alike): the median over `repetitions` blocks of each block's mean."""
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for i in range(block * repetitions):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            step(runs[name], i)
            times[name].append(time.perf_counter() - start)
    return {
        name: statistics.median(
            statistics.fmean(t[k * block : (k + 1) * block]) for k in range(repetitions)
        )
        for name, t in times.items()
    }


def main() -> None:
    args = harness.parse_args(__doc__)
    n_features, hidden, n_actions, batch = (32, 256, 8, 64) if args.quick else (64, 512, 16, 128)
    block = 100  # steps per timed block: one recorded step at the default frequency
    repetitions = 10 if args.quick else 60
    config = tf.ConfigProto(intra_op_parallelism_threads=2, inter_op_parallelism_threads=1)
    rng = np.random.default_rng(0)
    feeds = [
        (
            rng.normal(size=(batch, n_features)).astype(np.float32),
            rng.normal(size=(batch, n_features)).astype(np.float32),
            rng.normal(size=(batch,)).astype(np.float32),
            rng.integers(0, n_actions, size=(batch,)).astype(np.int32),
        )
        for _ in range(8)
    ]
    logdir = tempfile.mkdtemp(prefix="bench_tf1_")
    graph, inputs, loss, train, init = _build(n_features, hidden, n_actions)
    with graph.as_default():
        raw = tf.Session(graph=graph, config=config)
        recorders = {
            name: GraphRecorder(
                f"{logdir}/{name}",
                losses={"td": loss},
                train_ops={"td": train},
                every_n_steps=every,
            )
            for name, every in (("wrapped", 100), ("hooked", 100), ("every_step", 1))
        }
        raw.run(init)
        monitored = tf.train.MonitoredSession(session_creator=_Existing(raw))
        hooked = tf.train.MonitoredSession(
            session_creator=_Existing(raw), hooks=[recorders["hooked"].hook()]
        )
    runs = {
        "plain": raw.run,
        "wrapped": recorders["wrapped"].wrap(raw).run,
        "monitored": monitored.run,
        "hooked": hooked.run,
        "every_step": recorders["every_step"].wrap(raw).run,
    }

    def step(run, i):
        run([train, loss], dict(zip(inputs, feeds[i % len(feeds)])))

    for run in runs.values():  # warm up: the first runs build executors
        for i in range(block):
            step(run, i)
    per_step = _per_step(
        {n: runs[n] for n in ("plain", "wrapped", "monitored", "hooked")}, step, block, repetitions
    )

    # Every step recorded: its transient tensors evict caches, so it is timed
    # in whole blocks against plain blocks rather than call by call.
    def block_of(name):
        return lambda: [step(runs[name], i) for i in range(block)]

    blocks = harness.interleaved_medians(
        {"plain": block_of("plain"), "every_step": block_of("every_step")}, repetitions
    )
    update_ops = recorders["every_step"]._update_ops
    calls = harness.interleaved_medians(
        {
            "snapshot": lambda: raw.run(update_ops.snapshot),
            "update_norms": lambda: raw.run(update_ops.table),
        },
        repetitions=50 if args.quick else 200,
    )
    builds = [
        _build_costs(50 if args.quick else 400, f"{logdir}/build{i}")
        for i in range(1 if args.quick else 3)
    ]
    overhead = _call_overhead(f"{logdir}/overhead", 20 if args.quick else 100)
    for recorder in recorders.values():
        recorder.close(raw)
    raw.close()

    variables = recorders["every_step"].variables
    harness.report("variables_recorded", len(variables))
    harness.report("parameters_recorded", sum(int(np.prod(v.shape)) for v in variables))
    harness.report("plain_step_seconds", per_step["plain"])
    harness.report("every_step_seconds", blocks["every_step"] / block)
    harness.report("every_step_ratio_vs_plain", blocks["every_step"] / blocks["plain"])
    harness.report("snapshot_call_seconds", calls["snapshot"])
    harness.report("update_norms_call_seconds", calls["update_norms"])
    harness.report("build_variables", builds[0][0])
    harness.report("minimize_build_seconds", statistics.median(b[1] for b in builds))
    harness.report("recorder_build_seconds", statistics.median(b[2] for b in builds))
    harness.report(
        "recorder_build_ratio_vs_minimize", statistics.median(b[2] / b[1] for b in builds)
    )
    harness.report("unrecorded_call_overhead_seconds", overhead)
    harness.report("wrapped_step_seconds", per_step["wrapped"])
    harness.report(
        "tf1_wrapped_run_ratio_default_vs_plain", per_step["wrapped"] / per_step["plain"]
    )
    harness.report("monitored_step_seconds", per_step["monitored"])
    harness.report("hooked_step_seconds", per_step["hooked"])
    harness.report(
        "tf1_hook_run_ratio_default_vs_without", per_step["hooked"] / per_step["monitored"]
    )


if __name__ == "__main__":
    main()
