"""GraphRecorder(rules=..., on_violation=...): TF1 runs checked like TF2 ones.

On the corpus's TF1 DDPG: `trainable=False` targets, actor and critic
optimizers with `var_list` (correct), and its mutant whose critic optimizer
has no `var_list`, so the TD error trains the actor.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from tb_gradscope import format as fmt
from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.rules import FlowRuleViolation, FlowRuleWarning
from tests.support.corpus.shapes_tf1 import build_ddpg
from tests.support.tf1_support import read_records

RULES = ["never(td_error, Actor/*)", "only(a_loss, [Actor/eval])"]


@pytest.fixture(scope="module")
def correct():
    return build_ddpg(leaky=False)


@pytest.fixture(scope="module")
def leaky():
    return build_ddpg(leaky=True)


def _recorder(m, logdir, **kwargs) -> GraphRecorder:
    return GraphRecorder(
        str(logdir),
        losses={"td_error": m.td_error, "a_loss": m.a_loss},
        train_ops={"td_error": m.ctrain, "a_loss": m.atrain},
        every_n_steps=2,
        **kwargs,
    )


def _feeds(m, step: int) -> tuple[dict, dict]:
    rng = np.random.default_rng(step)
    s = rng.normal(size=(8, 3)).astype(np.float32)
    critic = {
        m.S: s,
        m.a: rng.uniform(-1, 1, size=(8, 2)),
        m.R: rng.normal(size=(8, 1)),
        m.S_: rng.normal(size=(8, 3)),
    }
    return {m.S: s}, critic


def _learn(sess, m, step: int) -> None:
    """One DDPG learn step: actor, then critic, then the soft replacement."""
    actor_feed, critic_feed = _feeds(m, step)
    sess.run(m.atrain, actor_feed)
    sess.run(m.ctrain, critic_feed)
    sess.run(m.soft_replace)


def _violations(records, name: str) -> list[tuple[int, fmt.Event]]:
    return [
        (r.step, fmt.Event.from_json(doc))
        for r in records.get(("events", name), [])
        for doc in r.value
    ]


def test_rule_texts_are_written_in_the_flowgraph_record(correct, tmp_path):
    with correct.graph.as_default():
        gs = _recorder(correct, tmp_path, rules=RULES)
        with gs.wrap(tf.Session()) as sess:
            sess.run(correct.init)
            _learn(sess, correct, 0)
    [flow] = read_records(str(tmp_path))[("flowgraph", "")]
    assert flow.value[0]["cells"]["td_error"]["Actor/eval"] == fmt.IGNORED
    info = fmt.parse_plugin_content(_flowgraph_content(str(tmp_path)))
    assert info.attrs["rules"] == RULES


def _flowgraph_content(logdir: str) -> bytes:
    from tensorboard import context

    from tests.support.providers import EXPERIMENT, python_provider

    data = python_provider(logdir, {fmt.PLUGIN_NAME: 0})
    listed = data.list_blob_sequences(
        context.RequestContext(), experiment_id=EXPERIMENT, plugin_name=fmt.PLUGIN_NAME
    )
    [tags] = listed.values()
    return tags[fmt.tag_for(fmt.Kind.FLOWGRAPH, "")].plugin_content


def test_two_optimizers_with_var_list_break_no_rule(correct, tmp_path):
    """The critic's gradient reaches the actor (ignored: not in its var_list)
    while the actor's own optimizer moves it: no violation, at build or steps."""
    with correct.graph.as_default():
        gs = _recorder(correct, tmp_path, rules=RULES, on_violation="raise")
        with gs.wrap(tf.Session()) as sess:
            sess.run(correct.init)
            for step in range(5):
                _learn(sess, correct, step)
    records = read_records(str(tmp_path))
    assert gs.violations == []
    assert [r.step for r in records[("grad_stats", "td_error")]] == [0, 2, 4]
    assert records[("grad_stats", "td_error")][0].value.row("Actor/eval")["l2"] > 0
    assert not [k for k in records if k[0] == "events"]


def test_critic_without_var_list_is_a_violation_at_build_and_at_recorded_steps(leaky, tmp_path):
    with leaky.graph.as_default():
        gs = _recorder(leaky, tmp_path, rules=RULES)
        [built] = gs.violations  # known from the FlowGraph before any step
        assert built.name == "never(td_error, Actor/*)" and built.scope == "Actor"
        assert built.evidence["at"] == "trace" and built.evidence["state"] == fmt.UPDATES
        # The fix is the critic optimizer's var_list: a stop_gradient would cut a_loss too.
        assert built.evidence["cause"] == "optimizer_scope"
        assert built.message.endswith(
            "leave 'Actor' out of the var_list of the optimizer that minimizes loss 'td_error'"
        )
        with gs.wrap(tf.Session()) as sess:
            sess.run(leaky.init)
            for step in range(3):
                _learn(sess, leaky, step)
    records = read_records(str(tmp_path))
    [(trace_step, trace)] = _violations(records, "trace")
    assert trace_step == 0 and trace.evidence["at"] == "trace"
    steps = _violations(records, "step")
    assert [(s, e.name, e.scope) for s, e in steps] == [
        (0, "never(td_error, Actor/*)", "Actor"),
        (2, "never(td_error, Actor/*)", "Actor"),
    ]
    assert all(e.evidence["update_norm"] > 0 and e.evidence["l2"] > 0 for _, e in steps)
    assert [e.step for e in gs.violations] == [0, 0, 2]


def test_raise_stops_the_first_train_call_before_it_runs(leaky, tmp_path):
    with leaky.graph.as_default():
        gs = _recorder(leaky, tmp_path, rules=RULES, on_violation="raise")
        sess = gs.wrap(tf.Session())
        sess.run(leaky.init)
        before = sess.run(leaky.ae_params)
        actor_feed, _ = _feeds(leaky, 0)
        with pytest.raises(FlowRuleViolation, match=r"never\(td_error, Actor/\*\)") as raised:
            sess.run(leaky.atrain, actor_feed)
        assert [e.evidence["at"] for e in raised.value.events] == ["trace"]
        for was, now in zip(before, sess.run(leaky.ae_params)):
            np.testing.assert_array_equal(was, now)  # the train op never ran
        sess.close()
    assert _violations(read_records(str(tmp_path)), "trace")  # written before raising


def test_raise_at_a_recorded_step_comes_from_the_run_that_closes_it(leaky, tmp_path):
    """Caught once at build time, training goes on; the step's violation is
    written, then raised from the call that completes the step (after it ran)."""
    with leaky.graph.as_default():
        gs = _recorder(leaky, tmp_path, rules=RULES, on_violation="raise")
        sess = gs.wrap(tf.Session())
        sess.run(leaky.init)
        actor_feed, critic_feed = _feeds(leaky, 0)
        with pytest.raises(FlowRuleViolation):
            sess.run(leaky.atrain, actor_feed)
        sess.run(leaky.atrain, actor_feed)  # step 0 starts
        critic_before = sess.run(leaky.ce_params)
        with pytest.raises(FlowRuleViolation) as raised:
            sess.run(leaky.ctrain, critic_feed)  # and ends: checked here
        [event] = raised.value.events
        assert event.step == 0 and event.evidence["at"] == "step"
        assert any(np.any(a != b) for a, b in zip(critic_before, sess.run(leaky.ce_params)))
        sess.close()
    assert [s for s, _ in _violations(read_records(str(tmp_path)), "step")] == [0]


def test_warn_gives_one_flow_rule_warning_per_violation(leaky, tmp_path):
    with leaky.graph.as_default():
        gs = _recorder(leaky, tmp_path, rules=RULES, on_violation="warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with gs.wrap(tf.Session()) as sess:
                sess.run(leaky.init)
                _learn(sess, leaky, 0)
    flagged = [w for w in caught if issubclass(w.category, FlowRuleWarning)]
    assert len(flagged) == len(gs.violations) == 2
    assert all("never(td_error, Actor/*)" in str(w.message) for w in flagged)


def test_hook_raises_from_monitored_training_session(leaky, tmp_path):
    with leaky.graph.as_default():
        gs = _recorder(leaky, tmp_path / "logs", rules=RULES, on_violation="raise")
        actor_feed, _ = _feeds(leaky, 0)
        with pytest.raises(FlowRuleViolation):
            with tf.train.MonitoredTrainingSession(
                hooks=[gs.hook()],
                save_summaries_steps=None,
                save_summaries_secs=None,
                log_step_count_steps=None,
            ) as sess:
                sess.run(leaky.atrain, actor_feed)
    assert _violations(read_records(str(tmp_path / "logs")), "trace")


def test_rules_from_a_toml_file_bring_their_policy(leaky, tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text('on_violation = "raise"\nrules = ["never(td_error, Actor/*)"]\n')
    with leaky.graph.as_default():
        gs = _recorder(leaky, tmp_path / "logs", rules=str(path))
        sess = gs.wrap(tf.Session())
        sess.run(leaky.init)
        with pytest.raises(FlowRuleViolation):
            sess.run(leaky.atrain, _feeds(leaky, 0)[0])
        sess.close()


def test_tab_outlines_the_violated_cells_of_a_tf1_run(leaky, tmp_path):
    """The matrix route (what the tab draws) marks the cell a TF1 violation names."""
    import json

    from tensorboard.backend import application
    from tensorboard.plugins import base_plugin
    from werkzeug import test as werkzeug_test

    from tb_gradscope.plugin.plugin import GradscopePlugin
    from tests.support import providers

    logdir = tmp_path / "logs"
    with leaky.graph.as_default():
        gs = _recorder(leaky, logdir / "ddpg", rules=RULES)
        with gs.wrap(tf.Session()) as sess:
            sess.run(leaky.init)
            _learn(sess, leaky, 0)
    samples = {"gradscope": 10_000}
    plugin = GradscopePlugin(
        base_plugin.TBContext(
            data_provider=providers.python_provider(str(logdir), samples), sampling_hints=samples
        )
    )
    client = werkzeug_test.Client(application.TensorBoardWSGI([plugin]))
    response = client.get("/data/plugin/gradscope/matrix", query_string={"run": "ddpg", "step": 0})
    assert response.status_code == 200, response.get_data(as_text=True)
    cells = json.loads(response.get_data(as_text=True))["cells"]
    assert cells["td_error"]["Actor"]["violation"] is True
    assert cells["td_error"]["Critic"]["violation"] is False
    assert cells["a_loss"]["Actor"]["violation"] is False
