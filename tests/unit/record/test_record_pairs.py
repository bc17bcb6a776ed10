"""Recorder(pairs=...): drift of target/online pairs on the recorder's step, in
the recorder's one event file, read back through TensorBoard's data provider."""

from __future__ import annotations

import glob
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.pairs import pair_models
from tb_gradscope.record import Recorder
from tests.support.record_fixtures import batch, only, read_records

EVERY, COPY_EVERY = 4, 6


def _net(name: str) -> keras.Model:
    inputs = keras.Input((5,))
    h = keras.layers.Dense(4, activation="tanh", name="l1")(inputs)
    return keras.Model(inputs, keras.layers.Dense(1, name="q")(h), name=name)


def _models(seed: int = 0):
    keras.utils.set_random_seed(seed)
    online, target = _net("online"), _net("target")
    target.set_weights(online.get_weights())
    return online, target


def _distance(target, online) -> float:
    return float(
        np.sqrt(
            sum(
                np.sum((t.numpy().astype(np.float64) - o.numpy()) ** 2)
                for t, o in zip(target.weights, online.weights)
            )
        )
    )


def _dqn(logdir, pairs, steps=13, leaky=False, tau=None, in_function=True):
    """TD-like loss on online; target copied every COPY_EVERY steps (or EMA'd with `tau`)."""
    online, target = _models()
    opt = keras.optimizers.SGD(0.1)
    variables = online.trainable_variables + (target.trainable_variables if leaky else [])
    rec = Recorder(
        logdir=logdir,
        every_n_steps=EVERY,
        models={"online": online, "target": target},
        pairs=pairs(online, target) if callable(pairs) else pairs,
    )

    def train_step(x, y):
        with rec.tape() as tape:
            td = tf.reduce_mean((y + 0.9 * target(x) - online(x)) ** 2)
        rec.apply(opt, rec.gradients(tape, {"td": td}, variables))
        if tau is not None:
            for t, o in zip(target.weights, online.weights):
                t.assign((1.0 - tau) * t + tau * o)
        elif rec.step % COPY_EVERY == 0:  # rec.step counts applied steps
            for t, o in zip(target.weights, online.weights):
                t.assign(o)
        rec.record_drift()

    step = tf.function(train_step) if in_function else train_step
    seen = {}
    for s in range(steps):
        step(*batch(s))
        seen[s] = _distance(target, online)
    rec.close()
    return rec, seen


@pytest.mark.parametrize("in_function", [True, False])
def test_hard_copy_drift_on_the_recorder_step_in_one_event_file(tmp_path, in_function):
    rec, seen = _dqn(
        str(tmp_path), lambda o, t: [pair_models(t, o, every=COPY_EVERY)], in_function=in_function
    )
    assert len(glob.glob(os.path.join(str(tmp_path), "*tfevents*"))) == 1
    records = only(read_records(str(tmp_path)))
    drift = records[(fmt.Kind.DRIFT, "target<-online")]
    # In the steps that record gradients (0, 4, 8, 12), labelled as their gradients
    # are: the declared copy period says what to expect, not when to record (the
    # copies in steps 5 and 11, where rec.step reads 6 and 12, are seen between records).
    assert sorted(drift) == [0, 4, 8, 12]
    for step, table in drift.items():
        assert table.row("target")["distance"] == pytest.approx(seen[step], rel=1e-5, abs=1e-7)
    assert drift[4].row("target")["target_moved"] == 0.0  # no copy in steps 1..4
    assert drift[8].row("target")["target_moved"] > 0  # the copy in step 5
    assert drift[12].row("target")["target_moved"] > 0  # the copy in step 11
    assert drift[8].row("target")["tau"] == pytest.approx(0.0)  # no copy in step 8 itself
    assert drift[4].row("target")["distance"] > 0
    assert drift[4].row("target")["optimizer_vars"] == 0
    assert sorted(records[(fmt.Kind.GRAD_STATS, "td")]) == [0, 4, 8, 12]
    assert [p.name for p in rec.pairs] == ["target<-online"]


def test_ema_target_reads_its_tau(tmp_path):
    _, seen = _dqn(str(tmp_path), lambda o, t: [pair_models(t, o, tau=0.25)], tau=0.25, steps=9)
    drift = only(read_records(str(tmp_path)))[(fmt.Kind.DRIFT, "target<-online")]
    assert sorted(drift) == [0, 4, 8]
    # The first record has no step before the run's first: tau reads NaN there.
    assert np.isnan(drift.pop(0).row("target")["tau"])
    for step, table in drift.items():
        assert table.row("target")["tau"] == pytest.approx(0.25, rel=1e-3)
        assert table.row("target")["distance"] == pytest.approx(seen[step], rel=1e-5)
        assert table.info.attrs["tau"] == 0.25


def test_auto_detects_the_pair_and_sees_the_optimizer_write_the_target(tmp_path):
    rec, _ = _dqn(str(tmp_path), "auto", leaky=True, steps=5)
    assert [p.name for p in rec.pairs] == ["target<-online"]
    drift = only(read_records(str(tmp_path)))[(fmt.Kind.DRIFT, "target<-online")]
    assert (
        drift[4].row("target")["optimizer_vars"] == 4
    )  # rec.apply handed over the target's variables


def test_auto_without_a_pair_warns_and_record_drift_does_nothing(tmp_path):
    keras.utils.set_random_seed(0)
    model = _net("solo")
    with pytest.warns(UserWarning, match="found no target/online pair"):
        rec = Recorder(logdir=str(tmp_path), models=[model], pairs="auto")
    assert rec.pairs == []
    rec.record_drift()
    rec.close()


def test_pairs_never_change_training(tmp_path):
    def train(with_pairs):
        online, target = _models(3)
        opt = keras.optimizers.Adam(0.05)
        rec = Recorder(
            logdir=str(tmp_path / str(with_pairs)),
            every_n_steps=2,
            models={"online": online, "target": target},
            pairs=[pair_models(target, online, tau=0.5)] if with_pairs else None,
        )

        @tf.function
        def step(x, y):
            with rec.tape() as tape:
                td = tf.reduce_mean((y - online(x)) ** 2)
            rec.apply(opt, rec.gradients(tape, {"td": td}, online.trainable_variables))
            for t, o in zip(target.weights, online.weights):
                t.assign(0.5 * t + 0.5 * o)
            rec.record_drift()

        for s in range(5):
            step(*batch(s))
        rec.close()
        return [v.numpy() for v in online.weights + target.weights]

    for a, b in zip(train(True), train(False)):
        assert np.array_equal(a, b)


def test_bad_pairs_are_named(tmp_path):
    with pytest.raises(ValueError, match="pairs must be tb_gradscope.pairs.Pair"):
        Recorder(logdir=str(tmp_path), pairs=[("target", "online")])
    with pytest.raises(ValueError, match="pairs='auto'"):
        Recorder(logdir=str(tmp_path), pairs="detect")


def test_record_drift_refuses_xla(tmp_path):
    online, target = _models()
    rec = Recorder(
        logdir=str(tmp_path),
        models={"online": online, "target": target},
        pairs=[pair_models(target, online)],
    )

    @tf.function(jit_compile=True)
    def step():
        rec.record_drift()
        return tf.constant(0)

    with pytest.raises(ValueError, match="record_drift cannot run inside a jit_compile"):
        step()


def test_pair_models_scopes_follow_the_recorders_model_keys(tmp_path):
    """Drift scopes use the `models=` keys, as the matrix does, whatever the
    models' own (automatic) names."""

    def net():
        return keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])

    online, target = net(), net()
    rec = Recorder(
        str(tmp_path),
        models={"online": online, "target": target},
        pairs=[pair_models(target, online, tau=0.1)],
    )
    (pair,) = rec.pairs
    assert (pair.name, pair.target_root, pair.online_root) == ("target<-online", "target", "online")
    assert all(n.startswith("target/") for n in pair.target_names)
    assert all(n.startswith("online/") for n in pair.online_names)


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"every": "x"}, "every"),
        ({"every": 0}, "every"),
        ({"every": True}, "every"),
        ({"tau": "0.1"}, "tau"),
        ({"tau": 1.5}, "tau"),
        ({"tau": 0}, "tau"),
    ],
)
def test_pair_schedule_errors_name_the_argument(kwargs, named):
    online, target = _net("online_s"), _net("target_s")
    with pytest.raises(ValueError, match=rf"{named} must be"):
        pair_models(target, online, **kwargs)


def test_the_readme_loops_drift_carries_its_gradients_step_from_step_0(tmp_path):
    """The README quickstart's order (`rec.function`, `rec.apply`, the hard copy, then
    `record_drift()`): DRIFT and GRAD_STATS of one recorded step carry the same
    number, the first at step 0, and `report --step 0` shows the drift of step 0."""
    import io
    import json

    from tb_gradscope.commands import build_parser

    online, target = _models()
    opt = keras.optimizers.Adam(1e-3)
    rec = Recorder(
        logdir=str(tmp_path / "run"),
        every_n_steps=EVERY,
        models={"online": online, "target": target},
        pairs=[pair_models(target, online, every=50)],
    )

    @rec.function
    def train_step(x, y):
        with rec.tape() as tape:
            td = tf.reduce_mean((y + 0.9 * tf.stop_gradient(target(x)) - online(x)) ** 2)
        rec.apply(opt, rec.gradients(tape, {"td": td}, online.trainable_variables))
        if rec.step % 50 == 0:
            for t, o in zip(target.weights, online.weights):
                t.assign(o)
        rec.record_drift()

    after = {}
    for s in range(9):
        train_step(*batch(s))
        after[s] = _distance(target, online)
    rec.close()
    records = only(read_records(str(tmp_path / "run")))
    drift = records[(fmt.Kind.DRIFT, "target<-online")]
    assert sorted(drift) == sorted(records[(fmt.Kind.GRAD_STATS, "td")]) == [0, 4, 8]
    assert drift[0].row("target")["distance"] == pytest.approx(after[0], rel=1e-5)

    args = build_parser().parse_args(["report", str(tmp_path), "--step", "0", "--format", "json"])
    out = io.StringIO()
    assert args.run(args, out, io.StringIO()) == 0
    (run,) = json.loads(out.getvalue())["runs"]
    assert [d["step"] for d in run["drift"]] == [0]
