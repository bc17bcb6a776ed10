"""tb_gradscope.testing asserts flow contracts on real traced steps, with readable failures."""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

from tb_gradscope import testing
from tests.support import rules_fixtures as rf


@pytest.fixture(scope="module")
def model():
    keras.utils.set_random_seed(0)
    return rf.build_model()


def _flow(model, leaky: bool):
    def losses(s, a, returns):
        return rf.actor_critic_losses(model, s, a, returns, leaky)

    return testing.trace_flow(losses, *rf.batch(), models={"ac": model})


def test_stop_gradient_on_advantage_satisfies_the_contract(model):
    flow = _flow(model, leaky=False)
    testing.assert_never(flow, "actor", "ac/critic_head")
    testing.assert_blocked(flow, "actor", "ac/critic_head")
    testing.assert_only(flow, "actor", ["ac/trunk", "ac/actor_head"])
    testing.assert_only(flow, "critic", ["ac/trunk", "ac/critic_head"])
    testing.assert_rules(flow, ["never(critic, ac/actor_head)"])


def test_seeded_leak_fails_naming_loss_scope_and_missing_cut(model):
    flow = _flow(model, leaky=True)
    with pytest.raises(testing.FlowContractError) as caught:
        testing.assert_never(flow, "actor", "ac/critic_head")
    message = str(caught.value)
    assert "never(actor, ac/critic_head)" in message
    assert "loss 'actor' reaches scope 'ac/critic_head' (state updates)" in message
    assert "missing cut: ac/critic_head -> loss:actor" in message
    assert caught.value.events[0].evidence["missing_cut"] == ["ac/critic_head", "loss:actor"]
    assert isinstance(caught.value, AssertionError)


def test_blocked_fails_on_a_scope_the_loss_does_not_use(model):
    flow = _flow(model, leaky=False)
    with pytest.raises(testing.FlowContractError, match="does not depend on scope 'ac/actor_head'"):
        testing.assert_blocked(flow, "critic", "ac/actor_head")


def test_only_fails_when_the_leak_reaches_a_scope_outside_the_list(model):
    flow = _flow(model, leaky=True)
    with pytest.raises(testing.FlowContractError, match="reaches scope 'ac/critic_head'"):
        testing.assert_only(flow, "actor", ["ac/trunk", "ac/actor_head"])


def test_typo_in_a_scope_pattern_fails_instead_of_passing(model):
    flow = _flow(model, leaky=False)
    with pytest.raises(testing.FlowContractError, match="matches no scope"):
        testing.assert_never(flow, "actor", "ac/critc_head")


def test_optimizer_in_the_traced_step_tells_ignored_from_updates(model):
    optimizer = keras.optimizers.SGD(0.0)
    optimizer.build(model.trainable_variables)
    trunk_and_actor = [v for v in model.trainable_variables if "critic_head" not in v.path]

    def step(s, a, returns):
        with tf.GradientTape() as tape:
            losses = rf.actor_critic_losses(model, s, a, returns, leaky=True)
        grads = tape.gradient(losses["actor"], trunk_and_actor)
        optimizer.apply_gradients(zip(grads, trunk_and_actor))
        return losses

    flow = testing.trace_flow(step, *rf.batch(), models={"ac": model})
    assert flow.cells["actor"]["ac/critic_head"] == "ignored"
    # Reaching but not applied keeps never(); blocked() demands the cut itself.
    testing.assert_never(flow, "actor", "ac/critic_head")
    with pytest.raises(testing.FlowContractError, match=r"state ignored"):
        testing.assert_blocked(flow, "actor", "ac/critic_head")


def test_leak_around_an_existing_cut_names_that_cut_and_its_source_line(model):
    """The value enters the actor loss twice: once under stop_gradient, once not."""

    def losses(s, a, returns):
        logits, value = model(s)
        cut = tf.stop_gradient(returns - value[:, 0])
        log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a, logits=logits)
        return {"actor": -tf.reduce_mean(log_prob * cut) + 0.01 * tf.reduce_mean(value)}

    flow = testing.trace_flow(losses, *rf.batch(), models={"ac": model})
    with pytest.raises(testing.FlowContractError) as caught:
        testing.assert_never(flow, "actor", "ac/critic_head")
    (event,) = caught.value.events
    (cut,) = event.evidence["cuts"]
    assert cut.startswith("StopGradient") and "test_testing_helper.py:" in cut
    assert "does not cover it" in str(caught.value)


def test_assert_flow_traces_and_checks_rule_strings_in_one_call(model):
    def losses(s, a, returns):
        return rf.actor_critic_losses(model, s, a, returns, leaky=False)

    flow = testing.assert_flow(losses, *rf.batch(), rules=[rf.LEAK_RULE], models={"ac": model})
    assert flow.cells["actor"]["ac/critic_head"] == "blocked"

    def leaky(s, a, returns):
        return rf.actor_critic_losses(model, s, a, returns, leaky=True)

    with pytest.raises(
        testing.FlowContractError, match="missing cut: ac/critic_head -> loss:actor"
    ):
        testing.assert_flow(leaky, *rf.batch(), rules=[rf.LEAK_RULE], models={"ac": model})
