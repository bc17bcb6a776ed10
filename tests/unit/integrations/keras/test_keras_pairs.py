"""Target/online drift recorded by GradscopeCallback when another callback does the EMA."""

from __future__ import annotations

import keras
import numpy as np
import pytest

from tb_gradscope.integrations.keras import GradscopeCallback
from tb_gradscope.pairs import pair_models
from tests.support.keras_support import STEPS, fit, two_output_model
from tests.support.tf1_support import read_records

pytestmark = pytest.mark.slow

TAU, EVERY = 0.25, 2


class SoftUpdate(keras.callbacks.Callback):
    """The user's EMA target update after every batch: target <- (1-tau) target + tau online."""

    def __init__(self, target: keras.Model):
        super().__init__()
        self.target = target

    def on_train_batch_end(self, batch, logs=None):
        for t, o in zip(self.target.weights, self.model.weights):
            t.assign((1.0 - TAU) * t + TAU * o)


def test_ema_target_drift_is_recorded_with_its_tau(tmp_path):
    model = two_output_model()
    target = keras.models.clone_model(model)
    target.name = "target"
    target.set_weights(model.get_weights())
    pair = pair_models(target, model, tau=TAU)
    callback = GradscopeCallback(str(tmp_path), every_n_batches=EVERY, pairs=[pair])
    fit(model, [SoftUpdate(target), callback])
    records = read_records(str(tmp_path))
    [drift] = [v for (kind, _), v in records.items() if kind == "drift"]
    assert [r.step for r in drift] == list(range(0, STEPS, EVERY))
    root = drift[0].value.info.scopes[0]
    for rec in drift:
        row = rec.value.row(root)
        assert row["drift"] > 0
        if rec.step > 0:
            assert row["tau"] == pytest.approx(TAU, abs=1e-4)
    grads = records[("grad_stats", "q")]
    assert [r.step for r in grads] == [r.step for r in drift]
    assert np.isfinite([r.value.row("agent")["l2"] for r in grads]).all()


def test_drift_at_step_0_is_measured_from_the_pair_as_initialised(tmp_path):
    """The pair is read when training begins, so the record at step 0 compares
    with the pair as initialised, as later records compare with the batch
    before: tau reads the EMA's rate at step 0 too, never NaN."""
    model = two_output_model()
    target = keras.models.clone_model(model)
    target.name = "target"
    target.set_weights(model.get_weights())
    pair = pair_models(target, model, tau=TAU)
    callback = GradscopeCallback(str(tmp_path), every_n_batches=EVERY, pairs=[pair])
    fit(model, [SoftUpdate(target), callback])
    [drift] = [v for (kind, _), v in read_records(str(tmp_path)).items() if kind == "drift"]
    first = drift[0]
    assert first.step == 0
    row = first.value.row(first.value.info.scopes[0])
    assert row["tau"] == pytest.approx(TAU, abs=1e-4)
    assert np.isfinite(row["target_step"]) and row["target_step"] > 0
