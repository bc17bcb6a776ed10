"""Seed 03: an LSTM target kept as the tf.train.ExponentialMovingAverage of another.

The behaviour LSTM `beh` trains; `ema.apply([v.value ...])` keeps shadows; the
target LSTM `tare` is assigned the shadows after every step. Without "Change0"
(assigning `tare` from `beh` once at the start) the first steps use an
unrelated target: the monitor shows it as `never_synced` at step 0.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.pairs import pair_ema, pair_models
from tb_gradscope.read import anomalies
from tb_gradscope.read.drift import update_mode
from tb_gradscope.record import DriftMonitor
from tests.support import pairs_support as ps

DECAY = 0.9


def _lstm(name: str, seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((5, 3)), keras.layers.LSTM(4), keras.layers.Dense(2)], name=name
    )


def _train_seed03(logdir: str, change0: bool, steps: int = 40) -> dict:
    beh, tare = _lstm("beh", 1), _lstm("tare", 2)
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(16, 5, 3)), tf.float32)
    y = tf.constant(rng.normal(size=(16, 2)), tf.float32)
    ema = tf.train.ExponentialMovingAverage(decay=DECAY)
    sources = [v.value for v in beh.trainable_weights]
    ema.apply(sources)  # creates the shadows, initialised from beh
    if change0:
        for t, o in zip(tare.weights, beh.weights):
            t.assign(o)
    optimizer = keras.optimizers.Adam(1e-2)
    optimizer.build(beh.trainable_weights)
    monitor = DriftMonitor(
        [pair_ema(ema, beh.trainable_weights), pair_models(tare, beh)],
        logdir=logdir,
        every_n_steps=5,
    )

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(beh(x) - y))
        grads = tape.gradient(loss, beh.trainable_weights)
        optimizer.apply_gradients(zip(grads, beh.trainable_weights))
        ema.apply(sources)
        for t, s in zip(tare.trainable_weights, sources):
            t.assign(ema.average(s))
        monitor.record()

    monitor.record()
    for _ in range(steps):
        step()
    monitor.flush()
    return ps.read_drift(logdir)


@pytest.mark.slow
def test_ema_shadows_follow_with_the_declared_tau(tmp_path):
    records = _train_seed03(str(tmp_path), change0=True)
    assert sorted(records) == ["ema<-beh", "tare<-beh"]
    shadows = records["ema<-beh"]
    assert shadows.info.attrs["tau"] == pytest.approx(1 - DECAY)
    assert shadows.info.scopes[0] == "ema"
    assert any(s.startswith("ema/beh/lstm") for s in shadows.info.scopes)
    for name, record in records.items():
        _, _, series = anomalies.pair_series(record.info.attrs, record.tables, record.steps)
        mode = update_mode(series)
        assert mode.kind == "ema", (name, mode)
        assert mode.tau == pytest.approx(1 - DECAY, rel=1e-3)
        assert record.column(record.info.attrs["target"], "drift")[0] == 0.0
        assert anomalies.find_anomalies(name, record.info.attrs, record.steps, record.tables) == []


@pytest.mark.slow
def test_without_change0_the_target_lstm_is_never_synced(tmp_path):
    records = _train_seed03(str(tmp_path), change0=False)
    tare = records["tare<-beh"]
    events = anomalies.find_anomalies("tare<-beh", tare.info.attrs, tare.steps, tare.tables)
    assert [(e.name, e.step, e.scope) for e in events] == [(anomalies.NEVER_SYNCED, 0, "tare")]
    assert "never initialised from the online weights" in events[0].message
    shadows = records["ema<-beh"]  # the EMA itself starts from beh, so it is fine
    assert (
        anomalies.find_anomalies("ema<-beh", shadows.info.attrs, shadows.steps, shadows.tables)
        == []
    )
