"""Flow rules checked by GradscopeCallback during fit, violations written as EVENTS."""

from __future__ import annotations

import pytest

from tb_gradscope.format import Event
from tb_gradscope.integrations.keras import GradscopeCallback
from tb_gradscope.rules import FlowRuleViolation
from tests.support.keras_support import fit, two_output_model
from tests.support.tf1_support import read_records

pytestmark = pytest.mark.slow

HOLDS = "never(q, agent/aux*)"
BROKEN = "never(aux, agent/aux_hidden)"


def test_broken_rule_is_written_as_events_and_a_kept_one_is_not(tmp_path):
    callback = GradscopeCallback(str(tmp_path), every_n_batches=4, rules=[HOLDS, BROKEN])
    fit(two_output_model(), [callback])
    records = read_records(str(tmp_path))
    events = [Event.from_json(doc) for rec in records[("events", "")] for doc in rec.value]
    assert events and {e.name for e in events} == {BROKEN}
    assert {e.loss for e in events} == {"aux"}
    assert sorted({e.step for e in events}) == [r.step for r in records[("grad_stats", "aux")]]


def test_on_violation_raise_stops_fit_after_writing_the_violation(tmp_path):
    callback = GradscopeCallback(
        str(tmp_path), every_n_batches=4, rules=[BROKEN], on_violation="raise"
    )
    model = two_output_model()
    with pytest.raises(FlowRuleViolation):
        fit(model, [callback])
    assert model.optimizer.iterations.numpy() < 8  # stopped before the end of training
    assert read_records(str(tmp_path))[("events", "")]


def test_unknown_policy_is_refused_at_construction():
    with pytest.raises(ValueError, match="on_violation"):
        GradscopeCallback("unused", rules=[HOLDS], on_violation="explode")
