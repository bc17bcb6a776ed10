"""The seed scenarios through the static analysis: flow states, blocked edges, bodies."""

from __future__ import annotations

import pytest

from tb_gradscope.analysis import analyze_graph
from tb_gradscope.analysis._flatten import flatten
from tests.support.analysis_models import (
    actor_critic,
    marker_line,
    seed01_dqn_tf1,
    seed01_dqn_tf2,
    seed01_multihead,
    seed02_start_point,
    seed03_ema_lstm,
)

MODELS = "tests/support/analysis_models.py"


def analyze(built):
    return analyze_graph(
        built.graph, built.losses, built.variable_scopes, train_ops=built.train_ops
    )


def test_multihead_var_list_updates_own_head_only():
    fg = analyze(seed01_multihead())
    assert fg.source == "tf1"
    assert fg.cells["loss1"]["Agent/layer1"] == "updates"
    assert fg.cells["loss1"]["Agent/layer2_1"] == "updates"
    assert fg.cells["loss1"]["Agent/layer2_2"] == "independent"
    assert fg.cells["loss2"]["Agent/layer1"] == "updates"
    assert fg.cells["loss2"]["Agent/layer2_2"] == "updates"
    assert fg.cells["loss2"]["Agent/layer2_1"] == "independent"
    assert fg.cells["loss1"]["Agent"] == "updates"
    assert fg.blocked_edges == []
    assert set(fg.applied) == {"Agent", "Agent/layer1", "Agent/layer2_1", "Agent/layer2_2"}


def test_tf1_stop_gradient_blocks_target_net_with_source_line():
    fg = analyze(seed01_dqn_tf1("stop_gradient"))
    assert fg.cells["td"]["eval_net"] == "updates"
    assert fg.cells["td"]["target_net"] == "blocked"
    [edge] = fg.blocked_edges
    assert (edge.op_type, edge.cause) == ("StopGradient", "stop_gradient")
    assert edge.op_name == "q_target/StopGradient"
    assert edge.producer_scope == "target_net"
    assert edge.consumer_scope == "loss:td"
    assert (edge.source.file, edge.source.line) == (MODELS, marker_line("tf1_dqn"))
    blocked_graph_edges = [e for e in fg.edges if e.blocked_for]
    assert [(e.src, e.dst, e.blocked_for) for e in blocked_graph_edges] == [
        ("target_net", "loss:td", ("td",))
    ]


def test_tf1_target_fed_through_placeholder_is_independent():
    fg = analyze(seed01_dqn_tf1("placeholder"))
    assert fg.cells["td"]["eval_net"] == "updates"
    assert fg.cells["td"]["target_net"] == "independent"
    assert fg.blocked_edges == []


def test_tf1_without_stop_gradient_target_updates_is_a_leak():
    fg = analyze(seed01_dqn_tf1("leak"))
    assert fg.cells["td"]["target_net"] == "updates"
    assert fg.cells["td"]["eval_net"] == "updates"


def test_tf1_without_stop_gradient_var_list_excluded_scope_is_ignored():
    fg = analyze(seed01_dqn_tf1("var_list"))
    assert fg.cells["td"]["eval_net"] == "updates"
    assert fg.cells["td"]["target_net"] == "ignored"
    assert fg.applied == ["eval_net"]


@pytest.fixture(scope="module")
def tf2_dqn():
    return seed01_dqn_tf2(with_optimizer=True)


def test_tf2_stop_gradient_blocks_target_net(tf2_dqn):
    fg = analyze(tf2_dqn)
    assert fg.source == "tf2"
    assert fg.cells["td"]["eval_net/l1"] == "updates"
    assert fg.cells["td"]["eval_net"] == "updates"
    assert fg.cells["td"]["target_net/l2"] == "blocked"
    assert fg.cells["td"]["target_net"] == "blocked"
    [edge] = fg.blocked_edges
    assert edge.cause == "stop_gradient"
    assert (edge.source.file, edge.source.line) == (MODELS, marker_line("tf2_dqn"))


def test_tf2_hard_copy_to_target_is_not_applied(tf2_dqn):
    fg = analyze(tf2_dqn)
    assert fg.applied == ["eval_net", "eval_net/l1", "eval_net/l2"]


def test_tf2_step_without_optimizer_has_unknown_applied():
    fg = analyze(seed01_dqn_tf2(with_optimizer=False))
    assert fg.applied is None
    assert fg.cells["td"]["eval_net"] == "updates"
    assert fg.cells["td"]["target_net"] == "blocked"


def test_start_point_with_output_gradients_updates_network():
    fg = analyze(seed02_start_point())
    assert fg.losses[0].kind == "start_point"
    assert fg.cells["q_update"]["network"] == "updates"
    assert fg.cells["q_update"]["target_network"] == "independent"


@pytest.fixture(scope="module")
def lstm():
    return seed03_ema_lstm()


def test_lstm_seen_through_while_bodies(lstm):
    flat = flatten(lstm.graph)
    assert "_LoopVar" in flat.types
    fg = analyze(lstm)
    lstm_scopes = [s for s in fg.scopes if s.startswith("online/lstm")]
    assert lstm_scopes and all(fg.cells["loss"][s] == "updates" for s in lstm_scopes)


def test_lstm_target_is_never_gradient_reachable(lstm):
    fg = analyze(lstm)
    target = [s for s in fg.scopes if s.startswith("target")]
    assert target and all(fg.cells["loss"][s] == "blocked" for s in target)
    assert "target" not in (fg.applied or [])
    assert "online" in fg.applied
    assert {e.cause for e in fg.blocked_edges} == {"stop_gradient"}
    assert all(e.source.line == marker_line("lstm_target") for e in fg.blocked_edges)


def test_scope_graph_of_multihead_follows_the_layers():
    fg = analyze(seed01_multihead())
    edges = {(e.src, e.dst) for e in fg.edges}
    assert edges == {
        ("input:X", "Agent/layer1"),
        ("Agent/layer1", "Agent/layer2_1"),
        ("Agent/layer1", "Agent/layer2_2"),
        ("Agent/layer2_1", "loss:loss1"),
        ("Agent/layer2_2", "loss:loss2"),
        ("input:Y1", "loss:loss1"),
        ("input:Y2", "loss:loss2"),
    }
    assert {n.kind for n in fg.nodes} == {"scope", "input", "loss"}


def test_scope_graph_carries_lstm_loop_output_to_head(lstm):
    fg = analyze(lstm)
    edges = {(e.src, e.dst): e.blocked_for for e in fg.edges}
    assert edges[("online/lstm/lstm_cell", "online/head")] == ()
    assert edges[("target/lstm/lstm_cell", "target/head")] == ()
    assert edges[("target/head", "loss:loss")] == ("loss",)


def test_actor_gradient_through_critic_is_ignored_not_updates():
    fg = analyze(actor_critic())
    assert fg.cells["actor"] == {"actor": "updates", "critic": "ignored"}
    assert fg.cells["critic"] == {"actor": "independent", "critic": "updates"}
    assert fg.applied == ["actor", "critic"]
