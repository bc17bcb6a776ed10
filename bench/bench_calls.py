"""What a `rec.function` call costs when little or nothing is due.

Issue 34's schedule targets, measured on the README custom loop (16 units: pair
with a hard copy every 50, a rule, `record_drift`) and the DDPG recipe (two
Adams in `rec.training_step()`, two Polyak pairs), each against the same step
as a plain `tf.function`, in one process (TF on one thread, process CPU time,
candidates round-robin with the order rotated each round, median over rounds
of the ratio of that round's two runs):

  - `rec_function_idle`: a recorder with nothing due after its first step
    (every_n_steps=10**12): what an unrecorded step costs (target <= 1.01);
  - `rec_function_rare`: every_n_steps=1000 (target <= 1.01);
  - `rec_function`: the default every_n_steps=10;
  - `plain_again`: a second plain step, built and timed like the first: an
    A/A control whose distance from 1 is this run's resolution (a candidate
    within it of 1 is not told apart from the plain step).

Each run is 1,000 steps, so every candidate records the same share of its
steps in every run. After timing, each recorder's event file is checked to
hold what it claims (`bench.peers.check`).

`calls_host_us_per_unrecorded_call` (the headline): the wrapper's own host
work per call with nothing due, in microseconds of CPU (target <= 3 us; see
`host_us_per_call`).

    python -m bench.bench_calls --quick   # 5 rounds
    python -m bench.bench_calls           # 21 rounds
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench import peers, user_steps  # noqa: E402
from bench.harness import median_ratio, parse_args, report, rotated_samples  # noqa: E402
from bench.tf_steps import single_thread  # noqa: E402
from tb_gradscope import Recorder  # noqa: E402

STEPS = 1000
CANDIDATES = ("rec_function_idle", "rec_function_rare", "rec_function", "plain_again")


def host_us_per_call(logdir: str, reps: int, calls: int = 20_000) -> float:
    """The wrapper's own host work per unrecorded call, in us of CPU: a
    `rec.function` call whose plain variant is swapped, after tracing, for a
    Python function that does nothing, against calling that function directly
    (the TF call itself, +-20 us from call to call, would drown the figure)."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2, name="d")], name="m")
    optimizer = keras.optimizers.SGD(0.1)
    optimizer.build(model.trainable_variables)
    rec = Recorder(logdir, every_n_steps=user_steps.IDLE, models={"m": model})
    x = tf.ones([1, 2])

    def step(x):
        with rec.tape() as tape:
            losses = {"l": tf.reduce_sum(model(x))}
        rec.apply(optimizer, rec.gradients(tape, losses, model.trainable_variables))
        return losses["l"]

    def nothing(x):
        return x

    wrapped = rec.function(step)
    wrapped(x)  # step 0 records; every later call runs the plain variant
    wrapped(x)
    wrapped._variants["plain"] = nothing  # noqa: SLF001 - leaves only the host's work
    order = [("wrapped", wrapped), ("direct", nothing)]
    spent: dict[str, list[float]] = {"wrapped": [], "direct": []}
    for rep in range(reps):  # the order alternates: a first-after-the-other cost hits both
        for name, fn in order if rep % 2 else order[::-1]:
            start = time.process_time()
            for _ in range(calls):
                fn(x)
            spent[name].append((time.process_time() - start) / calls * 1e6)
    rec.close()
    return statistics.median(w - d for w, d in zip(spent["wrapped"], spent["direct"]))


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    single_thread()
    reps = 5 if args.quick else 21
    report("load_average_1m", os.getloadavg()[0])
    labels = ("plain",) + CANDIDATES
    with tempfile.TemporaryDirectory() as logdir:
        for group, build in (
            ("readme16", lambda: user_steps.readme_loop(16, logdir, STEPS, labels)),
            ("ddpg", lambda: user_steps.ddpg(64, logdir, STEPS, labels)),
        ):
            runs, claims = build()
            for run in runs.values():
                run()  # trace and warm up
            _, cpu = rotated_samples(runs, reps)
            peers.check(claims, 1 + reps)
            for label in CANDIDATES:
                report(f"calls_{group}_{label}_ratio", median_ratio(cpu, label, "plain"))
        host = host_us_per_call(os.path.join(logdir, "host"), 3 * reps)
    report("load_average_1m_end", os.getloadavg()[0])
    report("calls_host_us_per_unrecorded_call", host)


if __name__ == "__main__":
    main()
