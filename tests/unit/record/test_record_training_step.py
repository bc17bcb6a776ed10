"""`rec.training_step()`: a step of several tapes, optimizers or tf.functions is one step.

A DDPG-shaped step (critic and actor, two tapes, two optimizers, a Polyak
target) recorded every 10 steps, written three ways: one tf.function, an eager
block around one tf.function per update, and plain eager code.
"""

from __future__ import annotations

import io

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import Recorder
from tb_gradscope import format as fmt
from tb_gradscope.commands import build_parser
from tb_gradscope.format.flowgraph import TRAINABLE
from tb_gradscope.pairs import pair_models
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.summary import run_summary

STEPS, EVERY = 25, 10
RULES = ["never(critic, actor/*)", "only(actor, [actor])"]


def _mlp(name: str, inputs: int) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(8, activation="relu", name="l1"),
            keras.layers.Dense(1, name="l2"),
        ],
        name=name,
    )


class Ddpg:
    """Actor, critic and their Polyak targets; the updates as plain Python."""

    def __init__(self, logdir: str, **recorder_args):
        keras.utils.set_random_seed(0)
        self.actor, self.critic = _mlp("actor", 3), _mlp("critic", 4)
        self.actor_t, self.critic_t = _mlp("actor_t", 3), _mlp("critic_t", 4)
        self.actor_t.set_weights(self.actor.get_weights())
        self.critic_t.set_weights(self.critic.get_weights())
        self.critic_opt, self.actor_opt = keras.optimizers.Adam(1e-2), keras.optimizers.Adam(1e-2)
        models = {
            "actor": self.actor,
            "critic": self.critic,
            "actor_t": self.actor_t,
            "critic_t": self.critic_t,
        }
        self.rec = Recorder(
            logdir,
            every_n_steps=EVERY,
            models=models,
            pairs=[pair_models(self.critic_t, self.critic, tau=0.1)],
            **recorder_args,
        )

    def critic_loss(self, s, a, r, s2):
        y = r + 0.9 * tf.stop_gradient(self.critic_t(tf.concat([s2, self.actor_t(s2)], 1))[:, 0])
        return tf.reduce_mean((y - self.critic(tf.concat([s, a], 1))[:, 0]) ** 2)

    def update_critic(self, s, a, r, s2):
        with self.rec.tape() as tape:
            losses = {"critic": self.critic_loss(s, a, r, s2)}
        self.rec.apply(
            self.critic_opt, self.rec.gradients(tape, losses, self.critic.trainable_variables)
        )

    def update_actor(self, s):
        with self.rec.tape() as tape:
            losses = {"actor": -tf.reduce_mean(self.critic(tf.concat([s, self.actor(s)], 1)))}
        self.rec.apply(
            self.actor_opt, self.rec.gradients(tape, losses, self.actor.trainable_variables)
        )

    def polyak(self):
        pairs = zip(
            self.critic_t.weights + self.actor_t.weights, self.critic.weights + self.actor.weights
        )
        for t, o in pairs:
            t.assign(0.9 * t + 0.1 * o)

    def step_body(self, s, a, r, s2):
        with self.rec.training_step():
            self.update_critic(s, a, r, s2)
            self.update_actor(s)
            self.polyak()
            self.rec.record_drift()


def _batches(n: int):
    rng = np.random.default_rng(0)
    for _ in range(n):
        s, s2 = rng.normal(size=(2, 16, 3)).astype("float32")
        yield (
            s,
            rng.normal(size=(16, 1)).astype("float32"),
            rng.normal(size=16).astype("float32"),
            s2,
        )


def _train(logdir: str, shape: str, **recorder_args) -> Ddpg:
    agent = Ddpg(logdir, **recorder_args)
    if shape == "one_function":
        step = tf.function(agent.step_body)
    elif shape == "function_per_update":
        critic, actor, polyak = (
            tf.function(f) for f in (agent.update_critic, agent.update_actor, agent.polyak)
        )

        def step(s, a, r, s2):
            with agent.rec.training_step():
                critic(s, a, r, s2)
                actor(s)
                polyak()
                agent.rec.record_drift()
    else:
        step = agent.step_body
    for batch in _batches(STEPS):
        step(*batch)
    agent.rec.close()
    return agent


SHAPES = ["one_function", "function_per_update", "eager"]


@pytest.fixture(scope="module", params=SHAPES)
def trained(request, tmp_path_factory):
    logdir = str(tmp_path_factory.mktemp(request.param))
    agent = _train(logdir, request.param, rules=RULES)
    return request.param, logdir, agent


def test_both_losses_are_recorded_at_the_same_steps(trained):
    _, logdir, agent = trained
    (logs,) = load_logdir(logdir)
    assert int(agent.rec.step.numpy()) == STEPS
    assert sorted(logs.grads) == [0, 10, 20]
    for step in (0, 10, 20):
        assert sorted(logs.grads[step]) == ["actor", "critic"]


def test_update_norms_cover_both_optimizers(trained):
    _, logdir, _ = trained
    (logs,) = load_logdir(logdir)
    recorded = [s for s in (10, 20) if s in logs.updates]
    assert recorded == [10, 20]
    for step in recorded:
        table = logs.updates[step]
        for scope in ("actor", "critic", "actor_t", "critic_t"):
            assert table.row(scope)["update_norm"] > 0, (step, scope)


def test_flow_states_attribute_each_loss_to_its_own_optimizer(trained):
    shape, logdir, _ = trained
    (logs,) = load_logdir(logdir)
    table = run_summary(logs, step=10)["cells"]
    assert table["critic"]["critic"]["state"] == fmt.UPDATES
    assert table["actor"]["actor"]["state"] == fmt.UPDATES
    if shape != "eager":  # an eager step that was never traced has no static evidence
        assert table["actor"]["critic"]["state"] == fmt.IGNORED
        assert table["critic"]["actor"]["state"] == fmt.INDEPENDENT
        assert table["critic"]["critic_t"]["state"] == fmt.BLOCKED


def test_the_flowgraph_says_which_scopes_are_trainable_however_the_step_is_traced(trained):
    shape, logdir, _ = trained
    (logs,) = load_logdir(logdir)
    if shape == "eager":  # never traced: no FlowGraph, so nothing to say about trainability
        assert logs.flowgraphs == []
        return
    graph = logs.flowgraphs[-1][1]
    for scope in ("actor", "critic", "actor_t/l1", "critic_t/l2"):
        assert graph.trainability(scope) == TRAINABLE, (scope, graph.trainable)


def test_correct_two_optimizer_step_breaks_no_rule(trained):
    _, logdir, agent = trained
    assert agent.rec.violations == []
    args = build_parser().parse_args(["check", logdir])
    out, err = io.StringIO(), io.StringIO()
    assert args.run(args, out, err) == 0, out.getvalue() + err.getvalue()


def test_blocks_do_not_nest(tmp_path):
    agent = Ddpg(str(tmp_path))
    with agent.rec.training_step():
        with pytest.raises(ValueError, match="do not nest"):
            with agent.rec.training_step():
                pass


def test_an_exception_inside_the_block_leaves_the_step_as_it_was(tmp_path):
    agent = Ddpg(str(tmp_path))
    with pytest.raises(RuntimeError):
        with agent.rec.training_step():
            raise RuntimeError("user code failed")
    assert int(agent.rec.step.numpy()) == 0


def test_optimizer_the_recorder_never_sees_still_updates_its_own_loss(tmp_path):
    """The actor's optimizer is the script's own `apply_gradients`; only the
    critic goes through `rec.apply`. The actor loss updates the actor."""
    agent = Ddpg(str(tmp_path))
    rec = agent.rec

    @tf.function
    def step(s, a, r, s2):
        with rec.training_step():
            agent.update_critic(s, a, r, s2)
            with tf.GradientTape() as tape:
                actor_loss = -tf.reduce_mean(agent.critic(tf.concat([s, agent.actor(s)], 1)))
            variables = agent.actor.trainable_variables
            grads = list(zip(tape.gradient(actor_loss, variables), variables))
            rec.record_gradients({"actor": grads}, losses={"actor": actor_loss})
            agent.actor_opt.apply_gradients(grads)

    for batch in _batches(12):
        step(*batch)
    rec.close()
    (logs,) = load_logdir(str(tmp_path))
    cells = run_summary(logs, step=10)["cells"]
    assert cells["actor"]["actor"]["state"] == fmt.UPDATES
    assert cells["actor"]["critic"]["state"] == fmt.IGNORED
    assert logs.updates[10].row("actor")["update_norm"] > 0


def test_eager_run_given_rules_is_checked_and_says_static_evidence_is_missing(tmp_path):
    """An eager loop never traced writes no FlowGraph; `check` still finds the
    recorder's rules, fails the leak, passes the fix, and says what is missing."""
    results = {}
    for leaky in (False, True):
        logdir = str(tmp_path / ("leaky" if leaky else "clean"))
        agent = Ddpg(logdir, rules=["never(critic, actor/*)"])
        rec = agent.rec
        for batch in _batches(3):
            s, a, r, s2 = batch
            with rec.training_step():
                with rec.tape() as tape:
                    q = agent.critic(tf.concat([s, agent.actor(s) if leaky else a], 1))[:, 0]
                    losses = {"critic": tf.reduce_mean((r - q) ** 2)}
                variables = agent.critic.trainable_variables + (
                    agent.actor.trainable_variables if leaky else []
                )
                rec.apply(agent.critic_opt, rec.gradients(tape, losses, variables))
        rec.close()
        args = build_parser().parse_args(["check", logdir])
        out, err = io.StringIO(), io.StringIO()
        results[leaky] = (args.run(args, out, err), out.getvalue(), err.getvalue())
    assert results[False][0] == 0, results[False]
    assert results[True][0] == 1, results[True]
    assert "never(critic, actor/*)" in results[True][1]
    for _, _, err in results.values():
        assert "has no FlowGraph" in err and "rec.analyze(step_fn" in err


def test_eager_loop_traced_once_with_analyze_gets_static_evidence(tmp_path):
    agent = Ddpg(str(tmp_path), rules=RULES)
    batches = list(_batches(12))
    # Before any step: the trace must not leave the optimizers half-built.
    assert agent.rec.analyze(agent.step_body, *batches[0]) is not None
    for batch in batches:
        agent.step_body(*batch)
    agent.rec.close()
    (logs,) = load_logdir(str(tmp_path))
    cells = run_summary(logs, step=10)["cells"]
    assert cells["actor"]["critic"]["state"] == fmt.IGNORED
    assert cells["critic"]["actor"]["state"] == fmt.INDEPENDENT
    assert cells["critic"]["critic_t"]["state"] == fmt.BLOCKED
    assert sorted(logs.grads) == [0, 10]
