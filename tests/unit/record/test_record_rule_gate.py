"""Rules at recorded steps without a host round trip: the graph tests the rows a
rule constrains, the host checks only a step where one got a gradient, and a
violation still raises at the step it happens."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import rules
from tb_gradscope.pairs import pair_models
from tb_gradscope.record import GradscopeWarning, Recorder
from tb_gradscope.record import _rule_gate as rule_gate
from tb_gradscope.rules import RuleChecker

SCOPES = ["agent", "agent/trunk", "agent/trunk/dense", "agent/head", "target", "target/l1"]


def _rows(*rule_texts, losses=("td",)):
    watched = rule_gate.watched_rows(
        [rules.parse_rule(r) for r in rule_texts], list(losses), SCOPES
    )
    return (
        None
        if watched is None
        else {name: [SCOPES[i] for i in rows] for name, rows in watched.items()}
    )


def test_never_watches_the_rows_its_pattern_names():
    assert _rows("never(td, target/*)") == {"td": ["target", "target/l1"]}


def test_only_watches_every_row_but_the_allowed_ones_and_their_holders():
    assert _rows("only(td, [agent/trunk])") == {"td": ["agent/head", "target", "target/l1"]}


def test_a_rule_on_another_loss_watches_nothing():
    assert _rows("never(actor, target/*)", losses=("td", "critic")) == {"td": [], "critic": []}


def test_a_blocked_rule_has_the_host_check_every_recorded_step():
    assert _rows("never(td, target/*)", "blocked(td, target/*)") is None


def _dqn(logdir, leak_from=None, on_violation="log", made=None, every=2, steps=9):
    """A DQN step under rec.function, gradients recorded the first way (no FlowGraph,
    so only the step check sees a leak); the target leaks into td from step `leak_from`."""
    keras.utils.set_random_seed(0)

    def net(name):
        return keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(8, activation="relu", name="l1"),
                keras.layers.Dense(2, name="l2"),
            ],
            name=name,
        )

    online, target = net("online"), net("target")
    opt = keras.optimizers.SGD(1e-2)
    leak = tf.Variable(0.0, trainable=False)
    rec = Recorder(
        logdir=logdir,
        every_n_steps=every,
        models={"online": online, "target": target},
        pairs=[pair_models(target, online, every=4)],
        rules=["never(td, target/*)"],
        on_violation=on_violation,
    )
    if made is not None:
        made.append(rec)

    @rec.function
    def step(s, a, r, s2):
        with tf.GradientTape() as tape:
            q = tf.gather(online(s), a, batch_dims=1)
            next_q = tf.reduce_max(target(s2), axis=1)
            y = r + 0.9 * (leak * next_q + (1.0 - leak) * tf.stop_gradient(next_q))
            loss = tf.reduce_mean(tf.square(y - q))
        variables = online.trainable_variables + target.trainable_variables
        grads = list(zip(tape.gradient(loss, variables), variables))
        rec.record_gradients({"td": grads})
        rec.apply(opt, grads)
        rec.record_drift()
        return loss

    if made is not None:
        made.append(step)
    rng = np.random.default_rng(0)
    batch = (
        tf.constant(rng.normal(size=(8, 4)).astype("float32")),
        tf.constant(rng.integers(0, 2, 8)),
        tf.constant(rng.normal(size=8).astype("float32")),
        tf.constant(rng.normal(size=(8, 4)).astype("float32")),
    )
    try:
        for i in range(steps):
            if leak_from is not None and i == leak_from:
                leak.assign(1.0)
            step(*batch)
    finally:
        rec.close()
    return rec


def _count_host_checks(monkeypatch) -> list[int]:
    calls: list[int] = []
    original = RuleChecker.at_step

    def counted(self, step, *args, **kwargs):
        calls.append(int(step))
        return original(self, step, *args, **kwargs)

    monkeypatch.setattr(RuleChecker, "at_step", counted)
    return calls


def test_clean_recorded_steps_never_call_the_host(tmp_path, monkeypatch):
    calls = _count_host_checks(monkeypatch)
    rec = _dqn(str(tmp_path))
    assert calls == [] and rec.violations == []


def test_a_leak_is_checked_on_the_host_from_its_first_recorded_step(tmp_path, monkeypatch):
    calls = _count_host_checks(monkeypatch)
    rec = _dqn(str(tmp_path), leak_from=3)
    assert calls == [4, 6, 8]
    assert sorted({e.step for e in rec.violations}) == [4, 6, 8]


def test_raise_under_rec_function_stops_at_the_step_that_leaks(tmp_path):
    """The host checks after the call: FlowRuleViolation itself, from the call
    of the step that leaked, once that step's update ran."""
    made = []
    with pytest.raises(rules.FlowRuleViolation, match=r"never\(td, target/\*\)"):
        _dqn(str(tmp_path), leak_from=5, on_violation="raise", made=made)
    assert {e.step for e in made[0].violations} == {6}
    assert int(made[0].step.numpy()) == 7


def test_the_recorded_variant_hands_its_check_to_the_host_with_no_callback_in_the_step(tmp_path):
    made = []
    _dqn(str(tmp_path), steps=3, made=made)
    graph = made[1]._variants["recorded"]._list_all_concrete_functions()[0].graph.as_graph_def()  # noqa: SLF001
    ops = [n.op for n in graph.node] + [n.op for f in graph.library.function for n in f.node_def]
    assert "WriteSummary" in ops
    assert (
        "EagerPyFunc" not in ops and "If" not in ops
    )  # no host callback, no gate: the host checks after the call


def test_a_failing_write_of_the_hosts_check_stops_checking_not_training(tmp_path, monkeypatch):
    from tb_gradscope.record import _checks as checks

    def broken(self, events, step, name):
        if events:
            raise OSError("disk gone")

    monkeypatch.setattr(checks.RuleSteps, "_write_now", broken)
    with pytest.warns(
        GradscopeWarning, match="stopped checking rules after an error .OSError: disk gone"
    ):
        rec = _dqn(str(tmp_path), leak_from=3)
    assert int(rec.step.numpy()) == 9  # every step ran
    assert {e.step for e in rec.violations} == {
        4
    }  # found at the first leaking recorded step; checking stopped then
