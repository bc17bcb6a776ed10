"""GradscopeCallback on a two-output model, read back through TensorBoard's data provider.

Each recorded per-loss norm must equal a plain GradientTape recomputation of
the weighted loss on the same batch and weights, for every way Keras can
compile the step: plain graph, jit_compile=True, steps_per_execution=4.
"""

from __future__ import annotations

import pytest

from tb_gradscope.format import FlowGraph
from tb_gradscope.integrations.keras import GradscopeCallback
from tests.support.keras_support import (
    STEPS,
    WEIGHTS,
    fit,
    manual_norms,
    record_infos,
    reference_weights,
    two_output_model,
)
from tests.support.tf1_support import read_records

pytestmark = pytest.mark.slow

EVERY = 3
RECORDED = list(range(0, STEPS, EVERY))  # 0, 3, 6: 3 and 6 fall inside a 4-step execution

MODES = {
    "graph": dict(jit_compile=False, steps_per_execution=1),
    "jit": dict(jit_compile=True, steps_per_execution=1),
    "steps_per_execution_4": dict(jit_compile=False, steps_per_execution=4),
}


@pytest.fixture(scope="module")
def reference():
    return reference_weights()


@pytest.fixture(scope="module", params=sorted(MODES))
def recorded(request, tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp(request.param))
    model = two_output_model(**MODES[request.param])
    callback = GradscopeCallback(logdir, every_n_batches=EVERY)
    fit(model, [callback])
    return logdir, callback, model


def test_per_loss_norms_equal_a_manual_tape_on_the_batch_trained(recorded, reference):
    logdir, _, _ = recorded
    records = read_records(logdir)
    for loss in WEIGHTS:
        assert [r.step for r in records[("grad_stats", loss)]] == RECORDED
    for step in RECORDED:
        expected = manual_norms(step, reference[step])
        for loss, by_scope in expected.items():
            [table] = [r.value for r in records[("grad_stats", loss)] if r.step == step]
            for scope, l2 in by_scope.items():
                assert table.row(scope)["l2"] == pytest.approx(l2, rel=1e-5, abs=1e-7), (
                    loss,
                    scope,
                    step,
                )


def test_aux_head_gets_no_gradient_from_q(recorded):
    logdir, callback, _ = recorded
    records = read_records(logdir)
    for rec in records[("grad_stats", "q")]:
        for scope in ("agent/aux", "agent/aux_hidden"):
            assert rec.value.row(scope)["grad_vars"] == 0
            assert rec.value.row(scope)["l2"] == 0
        assert rec.value.row("agent/body")["l2"] > 0
    for rec in records[("grad_stats", "aux")]:
        assert rec.value.row("agent/aux")["l2"] > 0
        assert rec.value.row("agent/body")["grad_vars"] == 0
    [flow] = records[("flowgraph", "")]
    graph = FlowGraph.from_json(flow.value[0])
    assert graph.state("q", "agent/aux") == "independent"
    assert graph.state("q", "agent/body") == "updates"
    assert graph.state("aux", "agent/aux_hidden") == "updates"
    assert graph.state("aux", "agent/q") == "independent"


def test_recorded_losses_are_weighted_and_say_so(recorded):
    logdir, _, _ = recorded
    infos = record_infos(logdir)
    for loss, weight in WEIGHTS.items():
        attrs = infos[("grad_stats", loss)].attrs
        assert attrs["weighted"] is True and attrs["loss_weight"] == weight


def test_applied_updates_are_recorded_per_scope(recorded):
    logdir, _, _ = recorded
    updates = read_records(logdir)[("update_stats", "")]
    assert [r.step for r in updates] == RECORDED
    for rec in updates:
        for scope in ("agent/body", "agent/q", "agent/aux", "agent/aux_hidden"):
            assert rec.value.row(scope)["update_norm"] > 0
            assert rec.value.row(scope)["weight_norm"] > rec.value.row(scope)["update_norm"]


def test_the_step_is_traced_once(recorded):
    _, callback, _ = recorded
    assert (
        callback.probe.traces <= 2
    )  # tf.function traces twice when a first trace creates variables
