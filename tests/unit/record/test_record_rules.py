"""Acceptance (issue 6) through the Recorder: the shared-trunk actor-critic whose
advantage lacks stop_gradient breaks never(actor, ac/critic_head) at trace time
and at every recorded step, with the value head's gradient norm as evidence;
with stop_gradient it holds. Violations are EVENTS records read back through
TensorBoard's ingestion, and `tb-gradscope check` reports them."""

from __future__ import annotations

import argparse
import io

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope import rules
from tb_gradscope.commands import check as check_cmd
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.runs import RunLogs
from tb_gradscope.record import Recorder
from tests.support import rules_fixtures as rf

STEPS, EVERY = 4, 2


def _train(run_dir, leaky, in_function=True, record=True, autograph=True, **kwargs):
    keras.utils.set_random_seed(0)
    model = rf.build_model()
    optimizer = keras.optimizers.SGD(0.05)
    rec = Recorder(logdir=run_dir, every_n_steps=EVERY, models={"ac": model}, **kwargs)

    def train_step(s, a, returns):
        if not record:
            with tf.GradientTape() as tape:
                losses = rf.actor_critic_losses(model, s, a, returns, leaky)
                total = losses["actor"] + losses["critic"]
            variables = model.trainable_variables
            optimizer.apply_gradients(zip(tape.gradient(total, variables), variables))
            return
        with rec.tape() as tape:
            losses = rf.actor_critic_losses(model, s, a, returns, leaky)
        rec.apply(optimizer, rec.gradients(tape, losses, model.trainable_variables))

    step = tf.function(train_step, autograph=autograph) if in_function else train_step
    try:
        for _ in range(STEPS):
            step(*rf.batch())
    finally:
        rec.close()
    return rec, [v.numpy() for v in model.trainable_variables]


def _load(run_dir) -> RunLogs:
    (logs,) = load_logdir(run_dir)
    return logs


def _check(logdir) -> tuple[int, str]:
    out = io.StringIO()
    status = check_cmd.run(
        argparse.Namespace(logdir=logdir, rules=None, run_name=None), out, io.StringIO()
    )
    return status, out.getvalue()


@pytest.fixture(scope="module")
def leaky(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("leaky"))
    rec, _ = _train(run_dir, leaky=True, rules=[rf.LEAK_RULE])
    return run_dir, rec, _load(run_dir)


def test_leak_is_written_at_trace_time_with_the_missing_cut(leaky):
    _, rec, logs = leaky
    trace = [e for e in logs.events if e.evidence.get("at") == "trace"]
    assert [(e.step, e.name, e.loss, e.scope) for e in trace] == [
        (0, rf.LEAK_RULE, "actor", "ac/critic_head")
    ]
    assert trace[0].evidence["state"] == fmt.UPDATES
    assert trace[0].evidence["missing_cut"] == ["ac/critic_head", "loss:actor"]
    assert logs.recorded_rules == [rf.LEAK_RULE]  # in the FLOWGRAPH record, for `check`


def test_leak_is_written_at_every_recorded_step_with_the_value_head_norm(leaky):
    _, rec, logs = leaky
    at_step = [e for e in logs.events if e.evidence.get("at") == "step"]
    assert [(e.step, e.loss, e.scope) for e in at_step] == [
        (0, "actor", "ac/critic_head"),
        (2, "actor", "ac/critic_head"),
    ]
    for event in at_step:
        recorded = logs.grads[event.step]["actor"].row("ac/critic_head")["l2"]
        assert recorded > 0 and event.evidence["l2"] == pytest.approx(recorded)
        assert event.evidence["update_norm"] == pytest.approx(
            logs.updates[event.step].row("ac/critic_head")["update_norm"]
        )
    assert sorted((e.step, e.evidence["at"]) for e in rec.violations) == [
        (0, "step"),
        (0, "trace"),
        (2, "step"),
    ]


def test_evidence_norm_is_the_actor_gradient_on_the_value_head(leaky):
    keras.utils.set_random_seed(0)
    model = rf.build_model()
    head = model.get_layer("critic_head").trainable_variables
    with tf.GradientTape() as tape:
        actor = rf.actor_critic_losses(model, *rf.batch(), leaky=True)["actor"]
    expected = float(np.sqrt(sum(float(tf.reduce_sum(g * g)) for g in tape.gradient(actor, head))))
    (event,) = [e for e in leaky[2].events if e.step == 0 and e.evidence["at"] == "step"]
    assert event.evidence["l2"] == pytest.approx(expected, rel=1e-4)


def test_check_command_fails_on_the_recorded_leak(leaky):
    status, out = _check(leaky[0])
    assert status == check_cmd.VIOLATED
    assert "never(actor, ac/critic_head)" in out and "(recorded)" in out


def test_stop_gradient_holds_at_trace_time_and_every_step(tmp_path):
    rec, _ = _train(
        str(tmp_path), leaky=False, rules=[rf.LEAK_RULE, "blocked(actor, ac/critic_head)"]
    )
    logs = _load(str(tmp_path))
    assert rec.violations == [] and logs.events == []
    assert logs.steps == [0, 2] and logs.recorded_rules == [
        rf.LEAK_RULE,
        "blocked(actor, ac/critic_head)",
    ]
    assert _check(str(tmp_path))[0] == check_cmd.OK


def test_eager_loop_checks_each_recorded_step(tmp_path):
    rec, _ = _train(str(tmp_path), leaky=True, in_function=False, rules=[rf.LEAK_RULE])
    logs = _load(str(tmp_path))
    assert [(e.step, e.evidence["at"]) for e in logs.events] == [(0, "step"), (2, "step")]
    assert [e.step for e in rec.violations] == [0, 2]


@pytest.mark.parametrize("autograph", [False, True])
def test_raise_at_trace_time_writes_the_violation_first(tmp_path, autograph):
    """Raised while tracing, before any step runs; autograph re-raises it with
    its own context added, still as the FlowRuleViolation users catch."""
    with pytest.raises(rules.FlowRuleViolation, match=r"never\(actor, ac/critic_head\)") as caught:
        _train(
            str(tmp_path),
            leaky=True,
            rules=[rf.LEAK_RULE],
            on_violation="raise",
            autograph=autograph,
        )
    assert "never(actor, ac/critic_head)" in str(caught.value)
    logs = _load(str(tmp_path))
    assert [(e.step, e.evidence["at"]) for e in logs.events] == [(0, "trace")]
    assert logs.recorded_rules == [rf.LEAK_RULE]
    assert logs.steps == []  # no step ran


def test_raise_in_an_eager_loop_stops_at_the_first_recorded_step(tmp_path):
    with pytest.raises(rules.FlowRuleViolation) as caught:
        _train(
            str(tmp_path), leaky=True, in_function=False, rules=[rf.LEAK_RULE], on_violation="raise"
        )
    assert [e.step for e in caught.value.events] == [0]
    assert [e.step for e in _load(str(tmp_path)).events] == [0]


def test_raise_at_a_step_inside_tf_function_after_writing(tmp_path):
    """No FlowGraph (record_gradients without losses=): only the step check can see it."""
    keras.utils.set_random_seed(0)
    model = rf.build_model()
    variables = model.trainable_variables
    optimizer = keras.optimizers.SGD(0.05)
    rec = Recorder(
        logdir=str(tmp_path),
        every_n_steps=EVERY,
        models={"ac": model},
        rules=[rf.LEAK_RULE],
        on_violation="raise",
    )

    @tf.function
    def step(s, a, returns):
        with tf.GradientTape(persistent=True) as tape:
            losses = rf.actor_critic_losses(model, s, a, returns, leaky=True)
            total = losses["actor"] + losses["critic"]
        rec.record_gradients(
            {k: list(zip(tape.gradient(loss, variables), variables)) for k, loss in losses.items()}
        )
        rec.apply(optimizer, list(zip(tape.gradient(total, variables), variables)))

    with pytest.raises(tf.errors.UnknownError, match="FlowRuleViolation"):
        step(*rf.batch())
    rec.close()
    logs = _load(str(tmp_path))
    assert [(e.step, e.evidence["at"]) for e in logs.events] == [(0, "step")]
    assert [e.step for e in rec.violations] == [0]


def test_rules_never_change_training(tmp_path):
    _, with_rules = _train(str(tmp_path / "rules"), leaky=True, rules=[rf.LEAK_RULE])
    _, plain = _train(str(tmp_path / "plain"), leaky=True, record=False)
    for a, b in zip(with_rules, plain):
        assert np.array_equal(a, b)


def test_rules_from_a_file_with_its_policy(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text('on_violation = "warn"\nrules = ["never(actor, ac/critic_head)"]\n')
    with pytest.warns(rules.FlowRuleWarning):
        rec, _ = _train(str(tmp_path / "run"), leaky=True, in_function=False, rules=str(path))
    assert [e.step for e in rec.violations] == [0, 2]


def test_bad_rules_and_policies_are_named(tmp_path):
    with pytest.raises(ValueError, match="neither a rules file nor a rule"):
        Recorder(logdir=str(tmp_path), rules="nevr(a, b)")
    with pytest.raises(ValueError, match="on_violation"):
        Recorder(logdir=str(tmp_path), rules=[rf.LEAK_RULE], on_violation="explode")


@pytest.mark.slow
def test_jit_compiled_step_is_checked_where_its_stats_are_written(tmp_path):
    keras.utils.set_random_seed(0)
    model = rf.build_model()
    optimizer = keras.optimizers.SGD(0.05)
    rec = Recorder(
        logdir=str(tmp_path), every_n_steps=EVERY, models={"ac": model}, rules=[rf.LEAK_RULE]
    )

    @tf.function(jit_compile=True)
    def step(s, a, returns):
        with rec.tape() as tape:
            losses = rf.actor_critic_losses(model, s, a, returns, leaky=True)
        rec.apply(optimizer, rec.gradients(tape, losses, model.trainable_variables))
        return rec.stats()

    for _ in range(STEPS):
        rec.write(step(*rf.batch()))
    rec.close()
    logs = _load(str(tmp_path))
    assert sorted((e.step, e.evidence["at"]) for e in logs.events) == [
        (0, "step"),
        (0, "trace"),
        (2, "step"),
    ]
    for event in logs.events:
        if event.evidence["at"] == "step":
            assert event.evidence["l2"] == pytest.approx(
                logs.grads[event.step]["actor"].row("ac/critic_head")["l2"]
            )
