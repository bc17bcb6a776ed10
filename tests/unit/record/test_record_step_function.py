"""`Recorder.function`: unrecorded steps run the plain graph; records stay those of one trace."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import rules
from tb_gradscope.format.metadata import DRIFT_COLUMNS
from tb_gradscope.pairs import pair_models
from tb_gradscope.record import GradscopeWarning, Recorder
from tb_gradscope.record import _writing as writing
from tests.support.record_fixtures import read_records

COPY_EVERY = 6
RECORDING_OPS = {"WriteSummary", "EagerPyFunc", "Timestamp"}


def _nets(seed=0):
    keras.utils.set_random_seed(seed)

    def net(name):
        return keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(8, activation="relu", name="l1"),
                keras.layers.Dense(2, name="l2"),
            ],
            name=name,
        )

    online, target = net("online"), net("target")
    target.set_weights(online.get_weights())
    return online, target


def _batches(n):
    rng = np.random.default_rng(0)
    return [
        (
            tf.constant(rng.normal(size=(16, 4)).astype("float32")),
            tf.constant(rng.integers(0, 2, 16)),
            tf.constant(rng.normal(size=16).astype("float32")),
            tf.constant(rng.normal(size=(16, 4)).astype("float32")),
        )
        for _ in range(n)
    ]


def _dqn(logdir, wrap, steps=25, rule="never(td, target/*)", on_violation=None, close=True):
    """The README's custom loop (pair + rule + drift), every 4 steps, hard copy every 6."""
    online, target = _nets()
    opt = keras.optimizers.Adam(1e-2)
    rec = Recorder(
        logdir=logdir,
        every_n_steps=4,
        models={"online": online, "target": target},
        pairs=[pair_models(target, online, every=COPY_EVERY)],
        rules=[rule],
        on_violation=on_violation,
    )

    def train_step(s, a, r, s2):
        with rec.tape() as tape:
            q = tf.gather(online(s), a, batch_dims=1)
            y = r + 0.9 * tf.stop_gradient(tf.reduce_max(target(s2), axis=1))
            losses = {"td": tf.reduce_mean(tf.square(y - q))}
        rec.apply(opt, rec.gradients(tape, losses, online.trainable_variables))
        if rec.step % COPY_EVERY == 0:
            for t, o in zip(target.weights, online.weights):
                t.assign(o)
        rec.record_drift()
        return losses["td"]

    step = rec.function(train_step) if wrap else tf.function(train_step)
    for b in _batches(steps):
        step(*b)
    if close:
        rec.close()
    return rec, step, [w.numpy() for w in online.weights + target.weights]


def _ddpg(logdir, wrap, steps=23):
    """Two optimizers in one `training_step()` block, Polyak targets as pairs, every 5 steps."""
    keras.utils.set_random_seed(3)

    def net(name, inputs, outputs):
        return keras.Sequential(
            [
                keras.Input((inputs,)),
                keras.layers.Dense(6, activation="relu", name="h"),
                keras.layers.Dense(outputs, name="out"),
            ],
            name=name,
        )

    actor, critic, actor_t, critic_t = (
        net("actor", 4, 2),
        net("critic", 6, 1),
        net("actor_t", 4, 2),
        net("critic_t", 6, 1),
    )
    a_opt, c_opt = keras.optimizers.Adam(1e-2), keras.optimizers.SGD(1e-2)
    rec = Recorder(
        logdir=logdir,
        every_n_steps=5,
        models={"actor": actor, "critic": critic, "actor_t": actor_t, "critic_t": critic_t},
        pairs=[pair_models(actor_t, actor, tau=0.1), pair_models(critic_t, critic, tau=0.1)],
    )

    def train_step(s, a, r, s2):
        with rec.training_step():
            with rec.tape() as tape:
                y = r + 0.9 * tf.squeeze(critic_t(tf.concat([s2, actor_t(s2)], 1)), 1)
                critic_loss = tf.reduce_mean(
                    tf.square(tf.stop_gradient(y) - tf.squeeze(critic(tf.concat([s, a], 1)), 1))
                )
            rec.apply(
                c_opt, rec.gradients(tape, {"critic": critic_loss}, critic.trainable_variables)
            )
            with rec.tape() as tape:
                actor_loss = -tf.reduce_mean(critic(tf.concat([s, actor(s)], 1)))
            rec.apply(a_opt, rec.gradients(tape, {"actor": actor_loss}, actor.trainable_variables))
            for t, o in zip(actor_t.weights + critic_t.weights, actor.weights + critic.weights):
                t.assign(0.9 * t + 0.1 * o)
            rec.record_drift()
        return critic_loss

    step = rec.function(train_step) if wrap else tf.function(train_step)
    rng = np.random.default_rng(1)
    for _ in range(steps):
        b = [rng.normal(size=shape).astype("float32") for shape in ((8, 4), (8, 2), (8,), (8, 4))]
        step(*[tf.constant(x) for x in b])
    rec.close()
    return rec, step, [w.numpy() for m in (actor, critic, actor_t, critic_t) for w in m.weights]


def _tables(logdir):
    (run,) = read_records(logdir).values()
    return {
        key: {step: getattr(value, "values", value) for step, value in by_step.items()}
        for key, by_step in run.items()
    }


# The DRIFT columns measured against the step before: at the run's first step a
# plain tf.function has none (NaN), a `rec.function` call the pair as initialised.
STEP_COLUMNS = [
    DRIFT_COLUMNS.index(c)
    for c in ("target_step", "tau", "online_step", "gap", "tau_reverse", "gap_reverse")
]


def _assert_same_records(one, two, first_step_from_start=False):
    """`two` records what `one` does; with `first_step_from_start`, but for
    the DRIFT step columns of the first step, NaN in `one` and measured in `two`."""
    assert one.keys() == two.keys()
    for key in one:
        assert one[key].keys() == two[key].keys(), key
        for step in one[key]:
            a, b = one[key][step], two[key][step]
            if first_step_from_start and key[0].value == "drift" and step == min(one[key]):
                assert np.isnan(a[:, STEP_COLUMNS]).all(), key
                moves = [DRIFT_COLUMNS.index(c) for c in ("target_step", "online_step")]
                assert np.isfinite(b[:, moves]).all(), key  # tau is NaN where a gap is 0
                a, b = np.delete(a, STEP_COLUMNS, axis=1), np.delete(b, STEP_COLUMNS, axis=1)
            if isinstance(a, np.ndarray):
                np.testing.assert_array_equal(a, b, err_msg=f"{key} at step {step}")
            else:
                assert a == b, (key, step)


def _ops(concrete) -> list[str]:
    graph_def = concrete.graph.as_graph_def()
    return [n.op for n in graph_def.node] + [
        n.op for f in graph_def.library.function for n in f.node_def
    ]


@pytest.mark.slow
@pytest.mark.parametrize("shape", [_dqn, _ddpg], ids=["readme_dqn", "ddpg_training_step"])
def test_wrapped_step_trains_and_records_bitwise_as_one_trace(tmp_path, shape):
    _, _, weights_one = shape(str(tmp_path / "one"), wrap=False)
    _, _, weights_two = shape(str(tmp_path / "two"), wrap=True)
    for a, b in zip(weights_one, weights_two):
        np.testing.assert_array_equal(a, b)
    one, two = _tables(str(tmp_path / "one")), _tables(str(tmp_path / "two"))
    assert len(one) >= 4  # grad stats, updates, drift, FlowGraph at least
    _assert_same_records(one, two, first_step_from_start=True)


def test_unrecorded_steps_run_a_graph_without_recording_ops(tmp_path):
    _, step, _ = _dqn(str(tmp_path), wrap=True, steps=12)
    variants = step._variants  # noqa: SLF001 - what each kind of step runs
    plain = _ops(variants["plain"].get_concrete_function(*_batches(1)[0]))
    recorded = _ops(variants["recorded"].get_concrete_function(*_batches(1)[0]))
    assert not set(plain) & RECORDING_OPS
    assert plain.count("If") + plain.count("StatelessIf") == 1  # the user's own target copy
    assert "WriteSummary" in recorded  # the rules' check runs on the host, after a recorded call
    assert "EagerPyFunc" not in recorded
    # Drift is recorded in the call that records, compared with the values
    # read at its start: no variant of its own, none copies the pairs ahead.
    assert set(variants) == {"plain", "recorded"}


def test_host_picks_the_variant_by_step(tmp_path):
    rec = Recorder(
        logdir=str(tmp_path),
        every_n_steps=10,
        models={"online": _nets()[0]},
        pairs=[pair_models(*_nets()[::-1], every=25)],
    )
    picked = {s: rec.due_at(s) for s in (0, 1, 7, 8, 9, 10, 23, 24, 25)}
    assert picked == {
        0: "recorded",
        1: "plain",
        7: "plain",
        8: "plain",
        9: "plain",  # record_drift rides in the recorded call (labelled 10, as its gradients)
        10: "recorded",
        23: "plain",
        24: "plain",  # the copy period (25) says what to expect, not when to record
        25: "plain",
    }


@pytest.mark.parametrize(
    "shape, every, drift_steps",
    [(_dqn, 4, [0, 4, 8]), (_ddpg, 5, [0, 5, 10])],
    ids=["after_apply", "training_step_block"],
)
def test_drift_is_recorded_in_the_call_that_records_at_the_step_of_its_gradients(
    tmp_path, shape, every, drift_steps
):
    """After `apply` (which advances the step) as inside a training_step()
    block, the pairs are recorded in the recorded call and labelled with that
    call's step, as its gradients are; every other step runs the plain variant."""
    rec, _, _ = shape(str(tmp_path), wrap=True, steps=11)
    assert {s: rec.due_at(s) for s in range(12)} == {
        s: "recorded" if s % every == 0 else "plain" for s in range(12)
    }
    tables = _tables(str(tmp_path))
    grads = tables[next(k for k in tables if k[0].value == "grad_stats")]
    drift = tables[next(k for k in tables if k[0].value == "drift")]
    assert sorted(grads) == [s for s in range(11) if s % every == 0]
    assert sorted(drift) == drift_steps


def test_trace_time_rule_violation_raises_at_the_first_call(tmp_path):
    with pytest.raises(rules.FlowRuleViolation, match=r"never\(td, online/\*\)"):
        _dqn(str(tmp_path), wrap=True, steps=3, rule="never(td, online/*)", on_violation="raise")


def _regression(tmp_path):
    """A Recorder (every 5 steps) and a `rec.function` step regressing one net's output to 0."""
    online, _ = _nets()
    opt = keras.optimizers.SGD(0.1)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=5, models={"online": online})

    @rec.function
    def step(s):
        with rec.tape() as tape:
            loss = {"q": tf.reduce_mean(online(s) ** 2)}
        rec.apply(opt, rec.gradients(tape, loss, online.trainable_variables))

    return rec, step


def test_step_changed_between_calls_is_said_within_a_period_and_later_steps_are_recorded(tmp_path):
    """The host counts the step: an assign behind its back (as a checkpoint
    restore would) is found after the next call the count says is recorded, at
    most every_n_steps calls later, and said: a due step ran unrecorded, and
    that call recorded at the step it really ran (off schedule)."""
    rec, step = _regression(tmp_path)

    x = _batches(1)[0][0]
    for _ in range(3):
        step(x)
    rec.step.assign(20)  # as a checkpoint restore would
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):  # step 20 runs as the host's step 3 (plain); its step 5 (recorded) is 22
            step(x)
    said = [str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)]
    assert len(said) == 1 and "counted 5, read 22" in said[0] and "ran unrecorded" in said[0], said
    assert "(recorded) at step 22" in said[0], said
    for _ in range(7):
        step(x)
    rec.close()
    steps = sorted(
        _tables(str(tmp_path))[
            next(k for k in _tables(str(tmp_path)) if k[0].value == "grad_stats")
        ]
    )
    assert steps == [0, 22, 25, 30]


def test_a_resumed_run_records_only_at_its_recorded_steps(tmp_path):
    """The recorded variant has no in-graph gate: a first call at a step that is
    not due (a checkpoint restored at step 7) traces it but runs the plain step."""
    rec, step = _regression(tmp_path)
    rec.step.assign(7)

    x = _batches(1)[0][0]
    for _ in range(9):  # steps 7..15
        step(x)
    rec.close()
    tables = _tables(str(tmp_path))
    grad_steps = sorted(tables[next(k for k in tables if k[0].value == "grad_stats")])
    assert grad_steps == [10, 15]
    assert rec.flowgraph is not None


def test_recorded_variant_records_drift_without_a_gate_where_every_recorded_step_is_due(tmp_path):
    """In a training_step() block drift is due at every recorded step: the
    recorded variant writes it with no step test (no floormod; the records are
    those of one trace, test above)."""
    _, step, _ = _ddpg(str(tmp_path), wrap=True, steps=6)
    args = [tf.zeros(shape) for shape in ((8, 4), (8, 2), (8,), (8, 4))]
    recorded = _ops(step._variants["recorded"].get_concrete_function(*args))  # noqa: SLF001
    plain = _ops(step._variants["plain"].get_concrete_function(*args))  # noqa: SLF001
    assert recorded.count("FloorMod") == plain.count(
        "FloorMod"
    )  # the tape's own (concat's gradient)
    assert "WriteSummary" in recorded


def test_recorded_variant_writes_all_its_records_with_one_write(tmp_path):
    """Two losses' tables, the update table, two pairs' drift and the FlowGraph:
    one read of the written-tags list and one flush gate for all of them."""
    _, step, _ = _ddpg(str(tmp_path), wrap=True, steps=6)
    args = [tf.zeros(shape) for shape in ((8, 4), (8, 2), (8,), (8, 4))]
    recorded = _ops(step._variants["recorded"].get_concrete_function(*args))  # noqa: SLF001
    assert recorded.count("WriteSummary") >= 5
    assert (
        recorded.count("Timestamp") == 0
    )  # no flush gate: the host counts the records (test below)
    assert recorded.count("EagerPyFunc") == 0


def test_the_host_counts_a_variants_records_and_flushes_them_when_due(tmp_path, monkeypatch):
    """A variant's write has no in-graph flush gate: the host counts the
    records after each call and flushes when due (here at every call), so they
    are in the event file before the recorder closes."""
    monkeypatch.setattr(writing, "FLUSH_SECS", 0.0)
    rec, step, _ = _dqn(str(tmp_path), wrap=True, steps=10, close=False)
    try:
        tables = _tables(str(tmp_path))
        assert sorted(tables[next(k for k in tables if k[0].value == "grad_stats")]) == [0, 4, 8]
        assert sorted(tables[next(k for k in tables if k[0].value == "drift")]) == [0, 4, 8]
        assert rec._s.emitter.sink._file.queued == 0  # noqa: SLF001  every record counted, then flushed
    finally:
        rec.close()


def test_recorded_variant_records_drift_without_a_gate_or_a_snapshot(tmp_path):
    """The README loop (every 4, hard copy every 6): the host runs the recorded
    variant only at recorded steps, so its drift record has no step test, and
    compares with the values read at the call's start, so no snapshot is
    taken (the records are those of one trace, test above)."""
    rec, step, _ = _dqn(str(tmp_path), wrap=True, steps=6)
    args = [b for b in _batches(1)[0]]
    concrete = step._variants["recorded"].get_concrete_function(*args)  # noqa: SLF001
    recorded = _ops(concrete)
    plain = _ops(step._variants["plain"].get_concrete_function(*args))  # noqa: SLF001
    assert recorded.count("FloorMod") == plain.count("FloorMod")  # the loop's own copy test
    assert recorded.count("If") == plain.count("If") + 1  # the rules' gate test, none for drift
    group = rec._s.monitor._group  # noqa: SLF001 - the snapshot variables
    captured = {id(t) for t in concrete.captured_inputs}
    assert id(group.recorded.handle) in captured  # the targets kept for `target_moved`
    assert id(group.previous.handle) not in captured  # no snapshot is built


def _reads_of(variable, monkeypatch) -> list:
    """Counts host reads (`.numpy()`) of `variable`."""
    reads, numpy = [], type(variable).numpy

    def counted(self):
        if self is variable:
            reads.append(1)
        return numpy(self)

    monkeypatch.setattr(type(variable), "numpy", counted)
    return reads


def test_host_counts_the_step_and_reads_it_only_when_its_count_is_unknown(tmp_path, monkeypatch):
    """The counter is read before the first call only; a recorded call returns
    the step it began at, checked against the count after the call."""
    rec, step = _regression(tmp_path)

    reads = _reads_of(rec.step, monkeypatch)
    x = _batches(1)[0][0]
    for _ in range(12):  # steps 0..11, recorded at 0, 5 and 10
        step(x)
    assert len(reads) == 1
    assert rec._s.host_step == int(rec.step.numpy()) == 12  # noqa: SLF001
    rec.advance()  # an eager move outside the wrapper: the next call reads again
    step(x)
    assert len(reads) == 3 and rec._s.host_step == 14  # noqa: SLF001
    rec.close()
    tables = _tables(str(tmp_path))
    assert sorted(tables[next(k for k in tables if k[0].value == "grad_stats")]) == [0, 5, 10]


def test_an_advance_under_a_cond_makes_the_host_read_the_step_at_every_call(tmp_path, monkeypatch):
    """The host cannot count an advance that depends on data: it reads the
    counter before every call, and records exactly at the recorded steps."""
    online, _ = _nets()
    opt = keras.optimizers.SGD(0.1)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=3, models={"online": online})

    @rec.function
    def step(s, extra):
        with rec.tape() as tape:
            loss = {"q": tf.reduce_mean(online(s) ** 2)}
        opt.apply_gradients(rec.gradients(tape, loss, online.trainable_variables))
        rec.advance()

        def once_more():
            rec.advance()
            return tf.constant(True)

        tf.cond(extra, once_more, lambda: tf.constant(False))

    reads = _reads_of(rec.step, monkeypatch)
    x = _batches(1)[0][0]
    ran = []
    for i in range(8):
        ran.append(int(rec.step.numpy()))
        step(x, tf.constant(i % 3 == 0))
    assert len(reads) == 8 + 8  # the loop's own reads, and the wrapper's before every call
    assert rec._s.host_step is None  # noqa: SLF001
    rec.close()
    tables = _tables(str(tmp_path))
    grad_steps = sorted(tables[next(k for k in tables if k[0].value == "grad_stats")])
    assert grad_steps == [s for s in ran if s % 3 == 0]


def _ema_run(logdir, watched, tau=0.25, steps=3):
    """One net, its EMA copy updated after each apply, recorded every 2 steps,
    by `rec.function` (explicit) or `rec.watch` (the step as written)."""
    online, target = _nets()
    opt = keras.optimizers.SGD(1e-1)
    rec = Recorder(
        logdir=logdir,
        every_n_steps=2,
        models={"online": online, "target": target},
        pairs=[pair_models(target, online, tau=tau)],
    )

    def loss_of(s, a, r):
        return tf.reduce_mean(tf.square(r - tf.gather(online(s), a, batch_dims=1)))

    def ema():
        for t, o in zip(target.weights, online.weights):
            t.assign((1.0 - tau) * t + tau * o)

    def explicit(s, a, r, s2):
        with rec.tape() as tape:
            losses = {"td": loss_of(s, a, r)}
        rec.apply(opt, rec.gradients(tape, losses, online.trainable_variables))
        ema()
        rec.record_drift()

    def as_written(s, a, r, s2):
        with tf.GradientTape() as tape:
            td = loss_of(s, a, r)
        grads = tape.gradient(td, online.trainable_variables)
        opt.apply_gradients(zip(grads, online.trainable_variables))
        ema()

    step = rec.watch(as_written) if watched else rec.function(explicit)
    for b in _batches(steps):
        step(*b)
    rec.close()
    (drift,) = [v for k, v in _tables(logdir).items() if k[0].value == "drift"]
    return drift


@pytest.mark.parametrize("watched", [False, True], ids=["function", "watch"])
def test_drift_at_step_0_is_measured_from_the_pair_as_initialised(tmp_path, watched):
    """The first recorded call compares the pair with itself as initialised
    (read at the call's start), as every later record compares with the step
    before: tau reads the EMA's rate at step 0 too, never NaN, and
    gap_reverse (the target now against online as initialised) is the EMA's
    own move, the copy's offset being 0 at the start."""
    drift = _ema_run(str(tmp_path), watched)
    columns = list(DRIFT_COLUMNS)
    assert sorted(drift) == [0, 2]
    for step, table in drift.items():
        row = dict(zip(columns, table[0]))
        assert row["tau"] == pytest.approx(0.25, abs=1e-4), step
        assert np.isfinite(row["target_step"]) and row["target_step"] > 0, step
    first = dict(zip(columns, drift[0][0]))
    # target(0) - online(init) = tau * (online(0) - online(init)): tau of online's first move
    assert first["gap_reverse"] == pytest.approx(0.25 * first["online_step"], rel=1e-4)
