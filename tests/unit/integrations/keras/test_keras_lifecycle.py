"""GradscopeCallback across fits, and where it refuses to run (with a clear reason)."""

from __future__ import annotations

import keras
import pytest

from tb_gradscope.integrations.keras import GradscopeCallback, _check_backend
from tests.support.keras_support import STEPS, fit, two_output_model
from tests.support.tf1_support import read_records


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_other_keras_backends_get_an_error_naming_the_supported_one(backend):
    with pytest.raises(ValueError, match=f"'{backend}' backend; set KERAS_BACKEND=tensorflow"):
        _check_backend(backend)
    _check_backend(keras.backend.backend())  # this session's: TensorFlow, accepted


@pytest.mark.parametrize("every", [0, -1, 2.5, True])
def test_every_n_batches_must_be_a_positive_int(every):
    with pytest.raises(ValueError, match="every_n_batches must be an int >= 1"):
        GradscopeCallback("unused", every_n_batches=every)


def test_uncompiled_model_is_named_in_the_error(tmp_path):
    model = keras.Sequential([keras.layers.Dense(1)], name="raw")
    model.build((None, 2))
    callback = GradscopeCallback(str(tmp_path))
    with pytest.warns(UserWarning, match="model 'raw' is not compiled"):
        callback.set_model(model)
    assert callback.disabled


@pytest.mark.slow
def test_second_fit_continues_the_steps_without_retracing(tmp_path):
    model = two_output_model()
    callback = GradscopeCallback(str(tmp_path), every_n_batches=2)
    fit(model, [callback])
    traces = callback.probe.traces
    fit(model, [callback])
    assert callback.probe.traces == traces
    steps = [r.step for r in read_records(str(tmp_path))[("grad_stats", "q")]]
    assert steps == list(range(0, 2 * STEPS, 2))


@pytest.mark.slow
def test_fit_without_the_callback_records_nothing_and_detach_restores_the_step(tmp_path):
    model = two_output_model()
    callback = GradscopeCallback(str(tmp_path), every_n_batches=1)
    fit(model, [callback])
    before = callback.probe.slot_step.numpy().copy()
    fit(model, [])  # the instrumented step is still compiled, but switched off
    assert (callback.probe.slot_step.numpy() == before).all()
    callback.detach()
    assert "train_step" not in model.__dict__ and model.train_function is None


def test_the_callback_checks_the_backend_when_it_is_made(monkeypatch):
    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    with pytest.raises(ValueError, match="'jax' backend; set KERAS_BACKEND=tensorflow"):
        GradscopeCallback("unused")
