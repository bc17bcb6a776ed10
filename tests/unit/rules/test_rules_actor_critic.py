"""Acceptance: the shared-trunk actor-critic whose advantage lacks stop_gradient
breaks never(actor, ac/critic_head) at trace time and at every recorded step,
with the value head's gradient norm as evidence; with stop_gradient it holds.
Logs are written by the real Recorder and read through TensorBoard's ingestion.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope import rules
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.runs import RunLogs
from tests.support import rules_fixtures as rf

pytestmark = pytest.mark.slow  # trains two runs with the real Recorder (~8 s)

NEVER = rules.parse_rule(rf.LEAK_RULE)
BLOCKED = rules.parse_rule("blocked(actor, ac/critic_head)")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, RunLogs]:
    return {r.run: r for r in load_logdir(rf.actor_critic_logdir(tmp_path_factory))}


def test_leak_breaks_never_at_trace_time_with_the_missing_cut(runs):
    leaky = runs["leaky"]
    step, flowgraph = leaky.flowgraphs[0]
    events = rules.check_flowgraph([NEVER, BLOCKED], flowgraph, step)
    assert [(e.name, e.loss, e.scope) for e in events] == [
        (str(NEVER), "actor", "ac/critic_head"),
        (str(BLOCKED), "actor", "ac/critic_head"),
    ]
    for event in events:
        assert event.type == fmt.VIOLATION
        assert event.evidence["state"] == fmt.UPDATES
        assert event.evidence["missing_cut"] == ["ac/critic_head", "loss:actor"]


def test_stop_gradient_holds_at_trace_time(runs):
    step, flowgraph = runs["clean"].flowgraphs[0]
    assert rules.check_flowgraph([NEVER, BLOCKED], flowgraph, step) == []
    assert flowgraph.cells["actor"]["ac/critic_head"] == fmt.BLOCKED


def test_leak_breaks_never_at_every_recorded_step_with_the_value_head_norm(runs):
    leaky = runs["leaky"]
    assert leaky.steps == [0, 2]
    for step in leaky.steps:
        events = rules.check_stats([NEVER], step, leaky.grads[step], leaky.updates.get(step))
        assert len(events) == 1
        event = events[0]
        assert (event.step, event.loss, event.scope) == (step, "actor", "ac/critic_head")
        recorded = leaky.grads[step]["actor"].row("ac/critic_head")["l2"]
        assert event.evidence["l2"] == pytest.approx(recorded) and recorded > 0


def test_evidence_norm_is_the_actor_gradient_on_the_value_head(runs):
    """Step 0 is recorded before the first update: recompute it with a tape."""
    keras.utils.set_random_seed(0)
    model = rf.build_model()
    head = model.get_layer("critic_head").trainable_variables
    with tf.GradientTape() as tape:
        actor = rf.actor_critic_losses(model, *rf.batch(), leaky=True)["actor"]
    expected = float(np.sqrt(sum(float(tf.reduce_sum(g * g)) for g in tape.gradient(actor, head))))
    leaky = runs["leaky"]
    event = rules.check_stats([NEVER], 0, leaky.grads[0])[0]
    assert event.evidence["l2"] == pytest.approx(expected, rel=1e-4)


def test_stop_gradient_holds_at_every_recorded_step(runs):
    clean = runs["clean"]
    assert clean.steps == [0, 2]
    for step in clean.steps:
        assert rules.check_stats([NEVER, BLOCKED], step, clean.grads[step]) == []
        flowgraph = clean.flowgraph_at(step)
        assert rules.check_stats([BLOCKED], step, clean.grads[step], flowgraph=flowgraph) == []


def test_blocked_needs_the_flowgraph_to_show_the_cut(runs):
    """No gradient on a scope is not enough for blocked(): the critic loss never
    uses the actor head, so it is independent, not blocked."""
    clean = runs["clean"]
    rule = rules.parse_rule("blocked(critic, ac/actor_head)")
    assert rules.check_stats([rule], 0, clean.grads[0]) == []
    events = rules.check_stats([rule], 0, clean.grads[0], flowgraph=clean.flowgraph_at(0))
    assert [(e.scope, e.evidence["state"]) for e in events] == [("ac/actor_head", fmt.INDEPENDENT)]


def test_rule_checker_applies_the_policy_on_recorder_tables(runs):
    leaky, clean = runs["leaky"], runs["clean"]
    checker = rules.RuleChecker([rf.LEAK_RULE], on_violation="raise")
    assert checker.rule_texts == [rf.LEAK_RULE]
    assert checker.at_trace(clean.flowgraphs[0][1]) == []
    scopes = clean.grads[0]["actor"].info.scopes
    arrays = {loss: table.values for loss, table in clean.grads[0].items()}
    assert checker.at_step(0, arrays, scopes, clean.updates[0].values) == []
    with pytest.raises(rules.FlowRuleViolation, match="never\\(actor, ac/critic_head\\)"):
        checker.at_trace(leaky.flowgraphs[0][1])
    arrays = {loss: table.values for loss, table in leaky.grads[2].items()}
    with pytest.raises(rules.FlowRuleViolation) as caught:
        checker.at_step(2, arrays, scopes)
    (event,) = caught.value.events
    assert event.step == 2 and event.evidence["l2"] > 0
    assert event.evidence["missing_cut"] == [
        "ac/critic_head",
        "loss:actor",
    ]  # from the FlowGraph seen at trace
    # A step whose tables lack the scope (created later) is no typo at run time.
    assert rules.RuleChecker(["never(actor, ac/later/*)"], "raise").at_step(2, arrays, scopes) == []
    with pytest.warns(rules.FlowRuleWarning):
        rules.RuleChecker([rf.LEAK_RULE], on_violation="warn").at_step(2, arrays, scopes)
