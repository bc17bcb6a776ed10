"""Recording overhead per train step: tb_gradscope against no recording and against hand-written summaries.

Three models, each trained by a tf.function step (Adam):
  - `dqn`: the `dqn` demo's networks (tb_gradscope.demos.common.mlp, CartPole
    sized: 4 -> 32 -> 32 -> 2, online + target behind tf.stop_gradient,
    batch 32) -- the headline model;
  - `mlp1m`: a ~1M-parameter MLP (512-1024-512-10, batch 256);
  - `cnn`: a small CNN (32x32x3, conv16-conv32-dense64-10, batch 64).
Candidates per model, run round-robin in one process with the order rotated
every round (ratios are candidate / baseline in process CPU time with TF on one
thread, as in bench_recording, the median over rounds of the ratio of that
round's two runs):
  - `baseline`: tape.gradient + apply_gradients, nothing recorded;
  - `every_step` / `default`: way 2 (rec.tape / rec.gradients / rec.apply) at
    every_n_steps=1 and at the default every_n_steps=10;
  - `every_step_lean`: `every_step` with `grad_columns=()` (no max |g| and
    zero-fraction passes; those columns read NaN, "not recorded");
  - `way1_every`: way 1 (tape.gradient, rec.record_gradients, rec.apply) at
    every step;
  - `hand_scalar`: what users write today, every step: one
    tf.summary.scalar of the gradient norm per variable;
  - `hand_hist`: one tf.summary.histogram per gradient, every step;
  - `attrib`: two losses (TD/CE + an L2 activity term), way 2, every 10 steps,
    against `baseline2` (the same two-loss sum, nothing recorded).
`<model>_values_per_recorded_step` says how much each candidate writes.

    python -m bench.bench_overhead --quick   # dqn, mlp1m and the user configurations but readme256, 5 rounds
    python -m bench.bench_overhead           # full: all three models

What users run (`bench.user_steps`, each against the same training without
tb_gradscope, at the default frequency): the README's three quickstarts (custom
loop with pair + rule + drift at 16 and 256 units, as `rec.function` as written
and as a one-trace `tf.function`; Keras `fit` with the callback and a rule;
TF1 `GraphRecorder`), a two-optimizer DDPG-shaped step in `rec.training_step()`
and an eager actor-critic loop.

Beside each of them, the logger a user writes by hand instead, on the same
model at the same frequency (`bench.peers`): on the README loops and the DDPG
step, per-variable gradient L2 + global norm with `tf.summary.scalar`, picked
on the host (a second tf.function every 10 steps) and in a `tf.cond`; gradient +
weight histograms, both ways; TF-Agents' `summarize_grads_and_vars`
(`record_if`). On the eager loop the scalar logger under a Python `if`; on
Keras a `train_step` override writing it in a `tf.cond`; on TF1
`tf.compat.v1.summary.scalar` ops fetched every 10th step. The README loop and
the DDPG step also run at every_n_steps=1000 (`rec_function_rare`), and the
README loop also as its step is written for `@rec.watch` (`rec_watch`). The
watched step and the explicit `rec.function` form differ by less than a
group's A/A control resolves (their traced variants differ by a few scalar
ops), so they are also timed in a run of their own, with the explicit form built
twice as that run's A/A control and more rounds (`WATCH_REPS`):
`user_<readme>_rec_watch_vs_rec_function` (over the mean of the explicit form's
two builds, per round) and its control
`user_<readme>_rec_function_again_vs_rec_function` (one build over the other);
`readme_watch_vs_rec_function_worst` is the worse README size, and
`readme_watch_control_worst` its control's farthest from 1. After
timing, every candidate's event files are checked against what it claims to
write (`peers.check`; the run fails otherwise). The README loops and the DDPG step
also run a second plain step (`plain_again`): an A/A control whose distance
from 1 (`user_<group>_plain_again_cpu_ratio`) is that run's resolution.

Headline (last lines): overhead_rare_worst (README and DDPG at every 1000),
overhead_every_step_ratio (dqn, every step), overhead_default_ratio: the worst
of what users run at the default frequency (the loops as `rec.function`;
`overhead_default_tf_function_worst` is the same with the loops as one-trace
`tf.function`), and overhead_vs_hand_logger last: the worst, over the six user
configurations, of our step time over the hand scalar logger's on the same
model (`user_<group>_<ours>_vs_<hand>`).
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
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from bench import peers, user_steps  # noqa: E402
from bench.harness import median_ratio, parse_args, report, rotated_samples, step_loop  # noqa: E402
from bench.tf_steps import baseline_step, built_optimizer, recorded_step, single_thread  # noqa: E402
from tb_gradscope.demos import common, dqn  # noqa: E402
from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS  # noqa: E402

# record before demos: importing tb_gradscope.demos.dqn first hits a circular
# import (demos -> pairs -> record -> pairs.detect) in the library.
from tb_gradscope.record import Recorder  # noqa: E402, I001
from tb_gradscope.record._stats import GRAD_COLUMNS, UPDATE_COLUMNS  # noqa: E402

N_GRAD_COLUMNS = len(GRAD_COLUMNS)
DEFAULT_EVERY = 10  # Recorder's default every_n_steps
AUX_WEIGHT = 1e-3
# rounds of the @rec.watch / rec.function run ({quick: rounds}): three
# candidates of 50 README steps each, ~0.1 s a round on this machine
WATCH_REPS = {False: 101, True: 31}


# ----- models: (variables, {root: model}, losses(*batch) -> {name: loss}, batch)


def dqn_setup(two_losses: bool = False):
    """The dqn demo's online/target networks on a CartPole-shaped batch."""
    online = common.mlp("online", 4, dqn.HIDDEN, 2)
    target = common.mlp("target", 4, dqn.HIDDEN, 2)
    rng = np.random.default_rng(0)
    batch = (
        tf.constant(rng.normal(size=(dqn.BATCH, 4)).astype(np.float32)),
        tf.constant(rng.integers(0, 2, dqn.BATCH)),
        tf.constant(rng.random(dqn.BATCH, np.float32)),
        tf.constant(rng.normal(size=(dqn.BATCH, 4)).astype(np.float32)),
    )

    def losses(s, a, r, s2):
        q_all = online(s)
        y = tf.stop_gradient(r + dqn.GAMMA * tf.reduce_max(target(s2), axis=1))
        q = tf.gather(q_all, a, axis=1, batch_dims=1)
        out = {"td": tf.reduce_mean(tf.square(y - q))}
        if two_losses:
            out["aux"] = AUX_WEIGHT * tf.reduce_mean(tf.square(q_all))
        return out

    return online.trainable_variables, {"online": online, "target": target}, losses, batch


def mlp1m_setup(two_losses: bool = False):
    inputs = keras.Input((512,))
    h = keras.layers.Dense(1024, activation="relu", name="l1")(inputs)
    h = keras.layers.Dense(512, activation="relu", name="l2")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="out")(h), name="mlp")
    rng = np.random.default_rng(1)
    batch = (
        tf.constant(rng.normal(size=(256, 512)).astype(np.float32)),
        tf.constant(rng.integers(0, 10, 256)),
    )

    def losses(x, y):
        logits = model(x)
        ce = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        out = {"ce": tf.reduce_mean(ce)}
        if two_losses:
            out["aux"] = AUX_WEIGHT * tf.reduce_mean(tf.square(logits))
        return out

    return model.trainable_variables, {"mlp": model}, losses, batch


def cnn_setup(two_losses: bool = False):
    inputs = keras.Input((32, 32, 3))
    h = keras.layers.Conv2D(16, 3, strides=2, activation="relu", name="conv1")(inputs)
    h = keras.layers.Conv2D(32, 3, strides=2, activation="relu", name="conv2")(h)
    h = keras.layers.Flatten()(h)
    h = keras.layers.Dense(64, activation="relu", name="fc")(h)
    model = keras.Model(inputs, keras.layers.Dense(10, name="out")(h), name="cnn")
    rng = np.random.default_rng(2)
    batch = (
        tf.constant(rng.random((64, 32, 32, 3), np.float32)),
        tf.constant(rng.integers(0, 10, 64)),
    )

    def losses(x, y):
        logits = model(x)
        ce = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        out = {"ce": tf.reduce_mean(ce)}
        if two_losses:
            out["aux"] = AUX_WEIGHT * tf.reduce_mean(tf.square(logits))
        return out

    return model.trainable_variables, {"cnn": model}, losses, batch


# ----- train steps


def way1_step(variables, models, losses, every, logdir):
    opt = built_optimizer(variables)
    rec = Recorder(logdir=logdir, every_n_steps=every, models=models)

    @tf.function
    def step(*batch):
        with tf.GradientTape() as tape:
            named = losses(*batch)
            loss = tf.add_n(list(named.values()))
        pairs = list(zip(tape.gradient(loss, variables), variables))
        rec.record_gradients({"+".join(named): pairs})
        rec.apply(opt, pairs)
        return loss

    return step, rec


def hand_step(variables, losses, logdir, kind):
    """What users hand-write: a summary per variable, every step."""
    opt = built_optimizer(variables)
    writer = tf.summary.create_file_writer(logdir)
    counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    names = [v.path.replace(":", "_") for v in variables]

    @tf.function
    def step(*batch):
        with tf.GradientTape() as tape:
            loss = tf.add_n(list(losses(*batch).values()))
        grads = tape.gradient(loss, variables)
        with writer.as_default(step=counter):
            for name, g in zip(names, grads):
                if kind == "scalar":
                    tf.summary.scalar(f"grad_norm/{name}", tf.norm(g))
                else:
                    tf.summary.histogram(f"grad/{name}", g)
        opt.apply_gradients(zip(grads, variables))
        counter.assign_add(1)
        return loss

    return step, writer


# ----- measuring


def recorded_values(rec, n_losses, grad_columns=N_GRAD_COLUMNS):
    """Values one recorded step writes: per (loss, scope) grad stats + per scope updates."""
    scopes = len(rec.layout.layout.scopes)
    return scopes * (n_losses * grad_columns + len(UPDATE_COLUMNS))


def measure(prefix, setup, steps, repetitions, logdir, only=None):
    """Reports each candidate's ratio for one model (`only`: a subset); returns the CPU ratios."""
    variables, models, losses, batch = setup()
    variables2, models2, losses2, batch2 = setup(two_losses=True)

    def path(label):
        return os.path.join(logdir, f"{prefix}_{label}")

    steps_of = {"baseline": baseline_step(variables, losses)}
    closers, recorders = [], {}

    def lean(*a):
        return recorded_step(*a, grad_columns=())

    for label, maker, every in (
        ("every_step", recorded_step, 1),
        ("default", recorded_step, DEFAULT_EVERY),
        ("every_step_lean", lean, 1),
        ("way1_every", way1_step, 1),
    ):
        steps_of[label], recorders[label] = maker(variables, models, losses, every, path(label))
    for kind in ("scalar", "hist"):
        steps_of[f"hand_{kind}"], writer = hand_step(variables, losses, path(kind), kind)
        closers.append(writer)
    steps_of["baseline2"] = baseline_step(variables2, losses2)
    steps_of["attrib"], recorders["attrib"] = recorded_step(
        variables2, models2, losses2, DEFAULT_EVERY, path("attrib")
    )
    if only is not None:
        steps_of = {k: v for k, v in steps_of.items() if k in only or k == "baseline"}
    runs = {}
    for label, step in steps_of.items():
        two = label in ("baseline2", "attrib")
        runs[label] = step_loop(step, batch2 if two else batch, steps)
        start = time.perf_counter()
        runs[label]()  # trace and warm up
        report(f"{prefix}_{label}_trace_s", time.perf_counter() - start)
    wall, cpu = rotated_samples(runs, repetitions)
    values = {
        label: recorded_values(
            rec,
            2 if label == "attrib" else 1,
            len(GRAD_COLUMNS) - (len(OPTIONAL_GRAD_COLUMNS) if label == "every_step_lean" else 0),
        )
        for label, rec in recorders.items()
        if label in steps_of
    }
    values["hand_scalar"] = len(variables)
    values["hand_hist"] = sum(
        int(np.prod(v.shape)) for v in variables
    )  # bucketed, but one sample per element
    values = {k: v for k, v in values.items() if k in steps_of}
    for rec in recorders.values():
        rec.close()
    for writer in closers:
        writer.close()
    report(f"{prefix}_params", int(sum(np.prod(v.shape) for v in variables)))
    report(f"{prefix}_variables", len(variables))
    report(f"{prefix}_baseline_cpu_ms_per_step", 1000 * statistics.median(cpu["baseline"]) / steps)
    report(f"{prefix}_baseline_ms_per_step", 1000 * statistics.median(wall["baseline"]) / steps)
    ratios = {}
    for label in steps_of:
        if label.startswith("baseline"):
            continue
        base = "baseline2" if label == "attrib" else "baseline"
        ratios[label] = median_ratio(cpu, label, base)
        report(f"{prefix}_{label}_wall_ratio", median_ratio(wall, label, base))
        report(f"{prefix}_{label}_cpu_ratio", ratios[label])
        if label in values:
            report(f"{prefix}_{label}_values_per_recorded_step", values[label])
    if {"every_step", "hand_scalar"} <= set(
        steps_of
    ):  # every step: ours / the per-variable scalar logger's
        report(
            f"{prefix}_every_step_vs_hand_scalar", median_ratio(cpu, "every_step", "hand_scalar")
        )
    return ratios


def measure_users(logdir, quick):
    """Each user configuration against its own baseline and its hand logger;
    returns ({group: (kind, {candidate: CPU ratio to the baseline})}, {group: ours / hand
    logger}, {README group: (@rec.watch / rec.function, its A/A control)}).

    Ratios are medians over rounds of the two runs' ratio in that round. After
    the timing, every candidate's event files are checked against what it
    claims to write (`peers.check`), so a logger that silently wrote nothing
    cannot pass for a cheap one.
    """
    reps = 5 if quick else 21
    groups = {  # group: (builder kind in user_steps.OURS / HAND, build)
        "readme16": ("readme", lambda: user_steps.readme_loop(16, logdir, 50)),
        "readme256": ("readme", lambda: user_steps.readme_loop(256, logdir, 50)),
        "ddpg": ("ddpg", lambda: user_steps.ddpg(64, logdir, 30)),
        "eager": ("eager", lambda: user_steps.eager_actor_critic(64, logdir, 20)),
        "keras": ("keras", lambda: user_steps.keras_fit(logdir, 40, DEFAULT_EVERY)),
        "tf1": ("tf1", lambda: user_steps.tf1_session(logdir, 50, DEFAULT_EVERY)),
    }
    if quick:  # its peers are readme16's
        groups.pop("readme256")
    ratios, vs_hand, watch_vs_explicit = {}, {}, {}
    for group, (kind, build) in groups.items():
        runs, claims = build()
        for run in runs.values():
            run()  # trace and warm up
        wall, cpu = rotated_samples(runs, reps)
        peers.check(claims, 1 + reps)
        report(f"user_{group}_checked_candidates", len(claims))
        base, ratios[group] = next(iter(runs)), {}
        for label in list(runs)[1:]:
            ratios[group][label] = median_ratio(cpu, label, base)
            report(f"user_{group}_{label}_wall_ratio", median_ratio(wall, label, base))
            report(f"user_{group}_{label}_cpu_ratio", ratios[group][label])
        ours, hand = user_steps.OURS[kind], user_steps.HAND[kind]
        vs_hand[group] = median_ratio(cpu, ours, hand)
        report(f"user_{group}_{ours}_vs_{hand}", vs_hand[group])
        for label in list(runs)[1:]:
            if label.startswith(("hand_", "tf_agents")) and label != hand:
                report(f"user_{group}_{ours}_vs_{label}", median_ratio(cpu, ours, label))
    for group in groups:
        if group.startswith("readme"):
            watch_vs_explicit[group] = measure_watch(group, logdir, quick)
    return {group: (groups[group][0], r) for group, r in ratios.items()}, vs_hand, watch_vs_explicit


def measure_watch(group: str, logdir: str, quick: bool) -> tuple[float, float]:
    """(`@rec.watch` / `rec.function`, the A/A control) on README loop `group`,
    the two forms and the explicit one built twice timed on their own. The
    watched step is held against the mean of the explicit form's two builds in
    each round (one slow build does not move it alone); the control is one
    build over the other."""
    reps = WATCH_REPS[quick]
    units = int(group.removeprefix("readme"))
    where = os.path.join(logdir, "watch_line")
    runs, claims = user_steps.readme_loop(units, where, 50, user_steps.WATCH_LABELS)
    for run in runs.values():
        run()  # trace and warm up
    wall, cpu = rotated_samples(runs, reps)
    peers.check(claims, 1 + reps)
    for samples in (wall, cpu):  # per round, the explicit form's two builds' mean
        samples["explicit"] = [
            (a + b) / 2 for a, b in zip(samples["rec_function"], samples["rec_function_again"])
        ]
    watch = median_ratio(cpu, "rec_watch", "explicit")
    control = median_ratio(cpu, "rec_function_again", "rec_function")
    report(
        f"user_{group}_rec_watch_vs_rec_function_wall", median_ratio(wall, "rec_watch", "explicit")
    )
    report(f"user_{group}_rec_function_again_vs_rec_function", control)
    report(f"user_{group}_rec_watch_vs_rec_function", watch)
    return watch, control


def main() -> None:
    args = parse_args(__doc__.splitlines()[0])
    single_thread()
    report("load_average_1m", os.getloadavg()[0])
    # steps per repetition are multiples of DEFAULT_EVERY: each repetition
    # holds the same share of recorded steps.
    # --quick traces only what the headlines need (tracing dominates a short run).
    if args.quick:
        plan = (
            ("mlp1m", mlp1m_setup, 10, 5, {"every_step", "every_step_lean", "hand_scalar"}),
            ("dqn", dqn_setup, 20, 7, {"every_step", "default", "hand_scalar"}),
        )
    else:
        plan = (
            ("mlp1m", mlp1m_setup, 10, 21, None),
            ("cnn", cnn_setup, 20, 21, None),
            ("dqn", dqn_setup, 50, 31, None),
        )
    with tempfile.TemporaryDirectory() as logdir:
        found = {
            prefix: measure(prefix, setup, steps, reps, logdir, only)
            for prefix, setup, steps, reps, only in plan
        }
        users, vs_hand, watch_vs_explicit = measure_users(logdir, args.quick)
    report("load_average_1m_end", os.getloadavg()[0])
    if "attrib" in found["dqn"]:
        report("attrib_2loss_every10_ratio", found["dqn"]["attrib"])
    report("mlp1m_every_step_ratio", found["mlp1m"]["every_step"])
    report("mlp1m_every_step_lean_ratio", found["mlp1m"]["every_step_lean"])
    report("dqn_bare_default_ratio", found["dqn"]["default"])

    def worst(label):
        return max(r[label] for _, r in users.values() if label in r)

    report(
        "overhead_rare_worst", worst("rec_function_rare")
    )  # README and DDPG at every_n_steps=1000
    report("overhead_default_tf_function_worst", worst("tf_function"))
    # The README's step as written under @rec.watch, per README configuration:
    # its CPU time over the explicit rec.function form's, in a run of their own
    # beside that run's A/A control (the explicit form built twice).
    report(
        "readme_watch_control_worst",
        max((c for _, c in watch_vs_explicit.values()), key=lambda c: abs(c - 1)),
    )
    report("readme_watch_vs_rec_function_worst", max(w for w, _ in watch_vs_explicit.values()))
    report("overhead_every_step_ratio", found["dqn"]["every_step"])
    report("overhead_default_ratio", max(r[user_steps.OURS[kind]] for kind, r in users.values()))
    report("overhead_vs_hand_logger", max(vs_hand.values()))


if __name__ == "__main__":
    main()
