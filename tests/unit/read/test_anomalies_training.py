"""Pair anomalies found in real trainings, read back through TensorBoard.

Each test trains a tiny online network with Adam, updates its target the way the
scenario says, records with DriftMonitor, reads the event file through
TensorBoard's data provider and runs `find_anomalies` on what it decoded.
"""

from __future__ import annotations

import time

import keras
import numpy as np
import pytest

from tb_gradscope import format as fmt
from tb_gradscope.pairs import detect_pairs, pair_models
from tb_gradscope.read import anomalies
from tb_gradscope.read.drift import scope_modes, update_mode
from tests.support import pairs_support as ps
from tests.support import providers


def _events(record):
    return anomalies.find_anomalies(
        record.info.name, record.info.attrs, record.steps, record.tables
    )


def _names(events):
    return sorted({e.name for e in events})


def _only(records):
    assert len(records) == 1, sorted(records)
    return next(iter(records.values()))


def test_undeclared_ema_is_detected_and_tau_estimated_within_5_percent(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: detect_pairs(models=[t, o]),
        ps.ema_update(0.01),
        steps=100,
    )
    record = _only(ps.read_drift(run.logdir))
    assert record.info.name == "target<-online"
    _, _, series = anomalies.pair_series(record.info.attrs, record.tables, record.steps)
    mode = update_mode(series)
    assert mode.kind == "ema"
    assert abs(mode.tau - 0.01) / 0.01 < 0.05, mode
    assert record.column("target", "drift")[0] == 0.0  # initialised from online
    assert _events(record) == []
    assert run.traces == 1  # one trace serves recorded and unrecorded steps


def test_declared_wrong_tau_names_both_values(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o, tau=0.1)],
        ps.ema_update(0.01),
        steps=100,
    )
    events = _events(_only(ps.read_drift(run.logdir)))
    assert _names(events) == [anomalies.TAU_MISMATCH]
    (event,) = events
    assert "declared tau 0.1 " in event.message and "effective tau 0.01" in event.message
    assert event.evidence["declared_tau"] == 0.1
    assert abs(event.evidence["effective_tau"] - 0.01) < 0.0005
    assert event.pair == "target<-online" and event.scope == "target"


def test_reinitialised_clone_is_never_synced_at_step_0(tmp_path):
    online = ps.mlp("online", seed=2)
    target = keras.models.clone_model(online)  # same architecture, fresh weights
    target.name = "target"
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o)],
        ps.ema_update(0.01),
        steps=30,
    )
    record = _only(ps.read_drift(run.logdir))
    events = _events(record)
    assert anomalies.NEVER_SYNCED in _names(events)
    first = next(e for e in events if e.name == anomalies.NEVER_SYNCED)
    assert first.step == 0
    assert first.evidence["drift"] == pytest.approx(record.column("target", "drift")[0], rel=1e-3)
    assert first.evidence["drift"] > 0.5


def test_hard_copy_every_100_steps_is_exact_and_mode_hard_100(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: detect_pairs(models=[t, o]),
        ps.hard_copy(100),
        steps=350,
        every_n_steps=25,
    )
    record = _only(ps.read_drift(run.logdir))
    drift = dict(zip(record.steps, record.column("target", "drift")))
    tau = dict(zip(record.steps, record.column("target", "tau")))
    for copy_step in (0, 100, 200, 300):
        assert drift[copy_step] == 0.0
    for copy_step in (100, 200, 300):
        assert tau[copy_step] == pytest.approx(1.0, abs=1e-6)
    assert drift[150] > 0
    _, _, series = anomalies.pair_series(record.info.attrs, record.tables, record.steps)
    assert update_mode(series).label == "hard(100)"
    assert _events(record) == []


@pytest.mark.parametrize(
    "declared, copies, mismatch",
    [(25, 25, False), (20, 40, True)],
    ids=["copies_as_declared", "copies_half_as_often"],
)
def test_declared_copy_period_is_judged_at_the_records_it_falls_on(
    tmp_path, declared, copies, mismatch
):
    """Records every 10 steps see a copy every 25 only at multiples of 50:
    that is the declared period, not a mismatch; copying every 40 while
    declaring 20 is one (both seen at multiples of 40)."""
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o, every=declared)],
        ps.hard_copy(copies),
        steps=210,
        every_n_steps=10,
    )
    record = _only(ps.read_drift(run.logdir))
    assert record.steps == list(range(0, 211, 10))  # the declared period adds no record
    _, _, series = anomalies.pair_series(record.info.attrs, record.tables, record.steps)
    assert update_mode(series).kind == "hard"
    assert ("every_mismatch" in _names(_events(record))) is mismatch


def test_target_in_optimizer_variables_is_moved_by_optimizer(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o)],
        ps.ema_update(0.01),
        steps=60,
        optimizer_vars="both",
    )
    events = _events(_only(ps.read_drift(run.logdir)))
    moved = [e for e in events if e.name == anomalies.MOVED_BY_OPTIMIZER]
    assert len(moved) == 1
    assert "target/dense_" in " ".join(moved[0].evidence["optimizer_scopes"])
    assert moved[0].evidence["unexplained_moves"] >= 2  # the dynamic evidence agrees


def test_target_moved_by_gradient_is_seen_without_optimizer_introspection(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o)],
        ps.ema_update(0.01),
        steps=60,
        optimizer_vars="both",
        monitor_optimizer=False,
    )
    events = _events(_only(ps.read_drift(run.logdir)))
    moved = [e for e in events if e.name == anomalies.MOVED_BY_OPTIMIZER]
    assert len(moved) == 1 and moved[0].evidence["optimizer_scopes"] == []
    assert moved[0].evidence["median_residual"] > 0.5


def test_copy_online_from_target_is_wrong_direction(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o, every=100)],
        ps.hard_copy(100, reverse=True),
        steps=220,
    )
    record = _only(ps.read_drift(run.logdir))
    events = _events(record)
    assert _names(events) == [anomalies.WRONG_DIRECTION]
    (event,) = events
    assert event.step == 100
    shuffled = anomalies.find_anomalies(  # series order does not matter
        record.info.name, record.info.attrs, record.steps[::-1], record.tables[::-1]
    )
    assert shuffled == events
    assert anomalies.find_anomalies(record.info.name, record.info.attrs, [], []) == []
    assert event.evidence["tau_reverse"] == pytest.approx(1.0, abs=1e-6)


def test_ema_of_trainable_weights_only_leaves_moving_statistics_untracked(tmp_path):
    target = ps.mlp("target", batchnorm=True, seed=1)
    online = ps.mlp("online", batchnorm=True, seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: detect_pairs(models=[t, o]),
        ps.ema_update(0.05, weights="trainable_weights"),
        steps=80,
    )
    record = _only(ps.read_drift(run.logdir))
    events = _events(record)
    assert _names(events) == [anomalies.MOVING_STATS_NOT_TRACKED]
    scopes = events[0].evidence["scopes"]
    assert sorted(s.rsplit("/", 1)[-1] for s in scopes) == ["moving_mean", "moving_variance"]
    _, _, series = anomalies.pair_series(record.info.attrs, record.tables, record.steps)
    assert update_mode(series).tau == pytest.approx(0.05, rel=0.01)
    modes = scope_modes(record.steps, record.tables)
    assert {modes[s].kind for s in scopes} == {"none"}
    dense = [s for s in modes if s.startswith("target/dense")]
    assert dense and all(modes[s].tau == pytest.approx(0.05, rel=0.01) for s in dense)


def test_ema_of_all_weights_tracks_moving_statistics(tmp_path):
    target = ps.mlp("target", batchnorm=True, seed=1)
    online = ps.mlp("online", batchnorm=True, seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: detect_pairs(models=[t, o]),
        ps.ema_update(0.05),
        steps=80,
    )
    record = _only(ps.read_drift(run.logdir))
    assert _events(record) == []
    state = record.info.attrs["state_scopes"]
    assert len(state) == 2
    assert np.nanmax(record.column(state[0], "target_step")) > 0


def test_target_never_updated_is_frozen(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o)],
        lambda t, o, s: None,
        steps=60,
    )
    events = _events(_only(ps.read_drift(run.logdir)))
    assert _names(events) == [anomalies.TARGET_FROZEN]
    assert events[0].step == 10
    assert events[0].evidence["drift_last"] > events[0].evidence["drift_first"]


@pytest.mark.slow
def test_rust_data_server_gives_the_same_series_and_anomalies(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o, tau=0.1)],
        ps.hard_copy(20, reverse=True),
        steps=40,
    )
    expected = _only(ps.read_drift(run.logdir))
    with providers.rust_provider(run.logdir, {"gradscope": 100000}) as rust:
        deadline = time.monotonic() + 30
        record = None
        while time.monotonic() < deadline:
            records = ps.read_drift(run.logdir, rust)
            record = records.get(expected.info.name)
            if record is not None and record.steps == expected.steps:
                break
            time.sleep(0.2)
    assert record is not None and record.steps == expected.steps
    assert record.info == expected.info
    for a, b in zip(record.tables, expected.tables):
        np.testing.assert_array_equal(a.values, b.values)
    assert _events(record) == _events(expected)
    assert {e.name for e in _events(record)} == {anomalies.WRONG_DIRECTION}


def test_hard_copies_that_stop_make_the_target_frozen(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    ps.sync(target, online)
    run = ps.train(
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o, every=20)],
        ps.hard_copy(20, until=40),
        steps=120,
        every_n_steps=10,
    )
    record = _only(ps.read_drift(run.logdir))
    _, _, series = anomalies.pair_series(record.info.attrs, record.tables, record.steps)
    assert update_mode(series).label == "hard(20)"
    events = _events(record)
    assert _names(events) == [anomalies.TARGET_FROZEN]
    assert events[0].step == 50
    assert events[0].evidence["last_step"] == 120


def test_copy_before_the_optimizer_step_is_still_hard_and_events_encode(tmp_path):
    target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
    run = ps.train(  # never synced at start, then synced at the top of every 30th step
        str(tmp_path),
        target,
        online,
        lambda t, o: [pair_models(t, o)],
        ps.hard_copy(30),
        steps=100,
        update_first=True,
    )
    record = _only(ps.read_drift(run.logdir))
    _, _, series = anomalies.pair_series(record.info.attrs, record.tables, record.steps)
    assert update_mode(series).label == "hard(30)"
    events = _events(record)
    assert _names(events) == [anomalies.NEVER_SYNCED]
    documents = fmt.decode_json(fmt.encode_json([e.to_json() for e in events]))
    assert [fmt.Event.from_json(d) for d in documents] == events
