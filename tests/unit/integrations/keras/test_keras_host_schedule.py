"""GradscopeCallback picks the train function on the host: the model's own
compiled step at unrecorded batches, the instrumented one only for calls that
hold a recorded batch (tb_gradscope/integrations/keras/_functions.py)."""

from __future__ import annotations

import keras
import pytest

from tb_gradscope.integrations.keras import GradscopeCallback
from tb_gradscope.record import _writing as writing
from tests.support.keras_support import STEPS, fit, two_output_model
from tests.support.tf1_support import read_records

pytestmark = pytest.mark.slow


class FunctionSpy(keras.callbacks.Callback):
    """After GradscopeCallback's hook: which function each call of this fit runs."""

    def __init__(self, gradscope: GradscopeCallback) -> None:
        super().__init__()
        self.gradscope = gradscope
        self.used: list[str] = []

    def on_train_batch_begin(self, batch, logs=None):
        functions = self.gradscope._functions  # noqa: SLF001 - what the test is about
        fn = self.model.train_function
        self.used.append(
            "recorded" if fn is functions.recorded else "plain" if fn is functions.plain else "?"
        )


def _steps(logdir: str, loss: str = "q") -> list[int]:
    return [r.step for r in read_records(logdir)[("grad_stats", loss)]]


class OnDisk(keras.callbacks.Callback):
    """After GradscopeCallback's hook: the steps whose `q` tables are on disk when batch `at` ends."""

    def __init__(self, logdir: str, at: int) -> None:
        super().__init__()
        self.logdir, self.at = logdir, at
        self.steps: list[int] | None = None

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.at and self.steps is None:
            self.steps = _steps(self.logdir)


def test_the_host_counts_a_drained_batch_and_flushes_when_due(tmp_path, monkeypatch):
    """The drain's one call writes the tables with no in-graph flush gate and
    no host callback inside it; the host counts the records after the call and
    flushes when due (here at every drain), so they are on disk during the
    epoch, not only at its end."""
    monkeypatch.setattr(writing, "FLUSH_SECS", 0.0)
    callback = GradscopeCallback(str(tmp_path), every_n_batches=2)
    on_disk = OnDisk(str(tmp_path), at=3)  # the epoch's last batch: before its end-of-epoch flush
    fit(two_output_model(), [callback, on_disk])
    assert on_disk.steps == [0, 2]  # drained when batches 1 and 3 began
    assert _steps(str(tmp_path)) == list(range(0, STEPS, 2))
    (drainer,) = callback._records._drainers.values()  # noqa: SLF001 - what the test is about
    graph = drainer.graph.as_graph_def()
    ops = [n.op for n in graph.node] + [n.op for f in graph.library.function for n in f.node_def]
    assert ops.count("WriteSummary") == 3 and "EagerPyFunc" not in ops


def test_unrecorded_batches_run_the_models_own_compiled_step(tmp_path):
    model = two_output_model()
    callback = GradscopeCallback(str(tmp_path), every_n_batches=3)
    spy = FunctionSpy(callback)
    fit(model, [callback, spy])
    assert spy.used == ["recorded" if step % 3 == 0 else "plain" for step in range(STEPS)]
    assert _steps(str(tmp_path)) == list(range(0, STEPS, 3))
    assert model.train_function is callback._functions.plain  # noqa: SLF001 - after fit: nothing to record


def test_a_call_of_several_batches_holding_a_recorded_one_runs_instrumented(tmp_path):
    model = two_output_model(steps_per_execution=4)
    callback = GradscopeCallback(str(tmp_path), every_n_batches=6)
    spy = FunctionSpy(callback)
    fit(model, [callback, spy])
    starts = range(0, STEPS, 4)
    assert spy.used == [
        "recorded" if any(s % 6 == 0 for s in range(b, b + 4)) else "plain" for b in starts
    ]
    assert _steps(str(tmp_path)) == list(range(0, STEPS, 6))


def test_a_second_fit_keeps_both_functions_and_continues_the_steps(tmp_path):
    model = two_output_model()
    callback = GradscopeCallback(str(tmp_path), every_n_batches=3)
    fit(model, [callback])
    functions = (callback._functions.recorded, callback._functions.plain)  # noqa: SLF001
    traces = callback.probe.traces
    fit(model, [callback])
    assert (callback._functions.recorded, callback._functions.plain) == functions  # noqa: SLF001
    assert callback.probe.traces == traces
    assert _steps(str(tmp_path)) == list(range(0, 2 * STEPS, 3))


class MovesTheStep(keras.callbacks.Callback):
    """Advances the optimizer's step once, after batch `at` (as nothing in Keras does)."""

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at = at

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.at:
            self.model.optimizer.iterations.assign_add(1)


def test_a_step_moved_outside_a_batch_switches_to_the_gated_step_at_the_next_check(tmp_path):
    """The documented limit: the host's count is checked when a recorded step
    is drained, so a recorded step falling between the move and that check is
    missed (here 3); from the check on, the in-graph gate decides (6 and 9)."""
    model = two_output_model()
    callback = GradscopeCallback(str(tmp_path), every_n_batches=3)
    spy = FunctionSpy(callback)
    fit(model, [callback, MovesTheStep(at=1), spy])  # steps 0, 1, 3, 4 | 5, 6, 8, 9
    assert not callback._functions.trusted  # noqa: SLF001
    assert _steps(str(tmp_path)) == [0, 6, 9]
    assert spy.used[-2:] == ["recorded", "recorded"]  # distrusted: the gated function decides
