"""doctor's never_synced on real trainings: a correct copy whose online network
jumps at its first step is silent, a twin never copied is found.

The false positive this pins (issue 25, seen on a ResNet-50 with an EMA twin on
random data): the online network's weights jump at the first steps, so the
first drift record (step 5, recorded every 5 steps) finds the correctly copied
target 0.86 of online's norm away, as far as a twin never copied. What tells
them apart is what the run recorded of online's moves before that record (the
UPDATE table at step 0): the copy is within online's path, the stranger is
not (`read.online_path`, tests/unit/read/test_anomalies_never_synced.py).
"""

from __future__ import annotations

from tb_gradscope.read.anomalies import NEVER_SYNCED
from tb_gradscope.read.logdir import load_logdir
from tests.unit.commands.test_doctor import _findings, _violations

RULE = "tracks(target, online, tau=0.01)"


def _train(logdir: str, copied: bool, first_lr: float, steps: int = 11) -> None:
    """A small tanh net ("online") regressed onto labels near 20 with SGD whose
    first step uses `first_lr` and every later one 0.001, and its EMA twin
    ("target", tau 0.01), copied from online before training when `copied`,
    recorded every 5 steps by the Recorder."""
    import keras
    import numpy as np
    import tensorflow as tf

    from tb_gradscope.pairs import pair_models
    from tb_gradscope.record import Recorder

    def net(name):
        return keras.Sequential(
            [
                keras.Input((8,)),
                keras.layers.Dense(16, activation="tanh", name="hidden"),
                keras.layers.Dense(1, name="out"),
            ],
            name=name,
        )

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    online, target = net("online"), net("target")
    if copied:
        target.set_weights(online.get_weights())
    optimizer = keras.optimizers.SGD(
        keras.optimizers.schedules.PiecewiseConstantDecay([1], [first_lr, 0.001])
    )
    rec = Recorder(
        logdir,
        every_n_steps=5,
        pairs=[pair_models(target, online, tau=0.01)],
        models={"online": online, "target": target},
    )
    x = tf.constant(rng.normal(size=(64, 8)), tf.float32)
    y = tf.constant(20.0 + rng.normal(size=(64, 1)), tf.float32)

    @tf.function
    def train_step():
        with rec.tape() as tape:
            mse = tf.reduce_mean(tf.square(online(x) - y))
        rec.apply(optimizer, rec.gradients(tape, {"mse": mse}, online.trainable_variables))
        for t, o in zip(target.weights, online.weights):
            t.assign(0.99 * t + 0.01 * o)
        rec.record_drift()

    for _ in range(steps):
        train_step()
    rec.close()


def _first_records(logdir) -> tuple[float, float]:
    """(drift of the target at the first drift record, online's update norm at step 0)."""
    (logs,) = load_logdir(str(logdir))
    (series,) = logs.drift.values()
    return series[0][1].row("target")["drift"], logs.updates[0].row("online")["update_norm"]


def test_a_correct_copy_whose_online_jumps_at_its_first_step_has_no_finding(tmp_path):
    _train(str(tmp_path / "run"), copied=True, first_lr=0.1)
    drift, first_move = _first_records(tmp_path / "run")
    assert drift > 0.5 and first_move > 1.0  # as far as a stranger, because online moved that far
    code, found, _ = _findings(tmp_path / "run", None)
    assert found == [] and code == 0, [(f["kind"], f["scope"], f["what"]) for f in found]
    assert _violations(tmp_path / "run", None, RULE) == []


def test_a_twin_never_copied_is_still_never_synced(tmp_path):
    _train(str(tmp_path / "run"), copied=False, first_lr=0.001)
    drift, first_move = _first_records(tmp_path / "run")
    assert drift > 0.5 and first_move < 0.1
    code, found, _ = _findings(tmp_path / "run", None)
    (finding,) = [f for f in found if f["evidence"].get("anomaly") == NEVER_SYNCED]
    assert code == 1 and (finding["scope"], finding["pair"]) == ("target", "target<-online")
    assert finding["evidence"]["distance"] > 10 * finding["evidence"]["online_path"]
    assert finding["rule"] == RULE
    (violation,) = _violations(tmp_path / "run", None, RULE)
    assert violation.evidence["anomaly"] == NEVER_SYNCED
    # The flaw is there from the first step: it is cited at step 0, where drift is
    # recorded with the gradients of that step (issue 57 item 8).
    assert finding["first_step"] == 0 and violation.step == 0


def test_the_tabs_drift_markers_agree_with_doctor(tmp_path):
    """The events route (the drift chart's markers) reads online's moves too."""
    import json

    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug import test as werkzeug_test

    from tb_gradscope.plugin.plugin import GradscopePlugin
    from tests.support import providers

    _train(str(tmp_path / "copied"), copied=True, first_lr=0.1)
    _train(str(tmp_path / "stranger"), copied=False, first_lr=0.001)
    plugin = GradscopePlugin(
        base_plugin.TBContext(
            data_provider=providers.python_provider(str(tmp_path)), sampling_hints={}
        )
    )
    client = werkzeug_test.Client(application.TensorBoardWSGI([plugin]))

    def anomalies(run):
        response = client.get("/data/plugin/gradscope/events", query_string={"run": run})
        assert response.status_code == 200
        return [
            e["name"]
            for e in json.loads(response.get_data(as_text=True))["events"]
            if e["type"] == "anomaly"
        ]

    assert NEVER_SYNCED not in anomalies("copied")
    assert NEVER_SYNCED in anomalies("stranger")
