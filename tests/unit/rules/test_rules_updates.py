"""The positive rule `updates(loss, scopes)`: a part that should train and never
does breaks it (issue 57, item 4), at trace time and at every recorded step."""

from __future__ import annotations

import pytest

from tb_gradscope import format as fmt
from tb_gradscope import rules
from tests.support import rules_fixtures as rf
from tests.unit.rules.test_rules_check import _flowgraph, _grads, _tables


def test_updates_reads_back_from_its_compact_form_one_scope_or_a_list():
    one = rules.parse_rule("updates(task, head/*)")
    many = rules.parse_rule("updates(task, [trunk/*, head/*])")
    assert one == rules.updates("task", "head/*") == rules.Updates("task", ("head/*",))
    assert many == rules.Updates("task", ("trunk/*", "head/*"))
    assert rules.parse_rule(str(one)) == one and rules.parse_rule(str(many)) == many
    with pytest.raises(rules.RuleError, match="updates"):
        rules.parse_rule("updates(task)")


def test_updates_in_a_rules_file_compact_and_as_a_table(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text(
        'rules = ["updates(task, head/*)"]\n\n'
        '[[rule]]\nkind = "updates"\nloss = "aux"\nscopes = ["trunk/*", "aux_head/*"]\n',
        encoding="utf-8",
    )
    assert rules.parse_rules_file(path).rules == (
        rules.updates("task", "head/*"),
        rules.updates("aux", ["trunk/*", "aux_head/*"]),
    )
    path.write_text('[[rule]]\nkind = "updates"\nloss = "aux"\nscopes = []\n', encoding="utf-8")
    with pytest.raises(rules.RulesFileError, match="rules.toml:1: updates rule: scopes"):
        rules.parse_rules_file(path)


def test_updates_holds_on_what_the_loss_trains_and_breaks_on_a_blocked_target():
    graph = _flowgraph(False)  # td updates online, target is blocked
    assert rules.check_flowgraph([rules.updates("td", "online/*")], graph) == []
    (event,) = rules.check_flowgraph([rules.updates("td", "target/*")], graph)
    assert (event.scope, event.evidence["state"]) == ("target", fmt.BLOCKED)
    assert "does not update scope 'target'" in event.message and "cut" in event.message


def test_updates_breaks_on_a_scope_left_out_of_the_optimizer_and_says_var_list():
    graph = _flowgraph(False)
    graph.cells["td"]["online/l1"] = fmt.IGNORED
    (event,) = rules.check_flowgraph([rules.updates("td", "online/*")], graph)
    assert (event.scope, event.evidence["state"]) == ("online/l1", fmt.IGNORED)
    assert "var_list" in event.message


def test_updates_at_a_step_breaks_where_no_gradient_arrived():
    grads = _tables(rf.dqn_records(False))[10]
    assert rules.check_stats([rules.updates("td", "online/*")], 10, grads) == []
    (event,) = rules.check_stats([rules.updates("td", "target/*")], 10, grads)
    assert (event.scope, event.evidence["grad_vars"]) == ("target", 0)
    assert "no gradient of 'td' reached it" in event.message


def test_updates_at_a_step_breaks_on_a_gradient_the_optimizer_drops():
    grads = _tables(rf.dqn_records(True))[10]
    graph = _flowgraph(True)
    for scope in ("target", "target/l1"):
        graph.cells["td"][scope] = fmt.IGNORED
    (event,) = rules.check_stats([rules.updates("td", "target/*")], 10, grads, flowgraph=graph)
    assert event.scope == "target" and event.evidence["state"] == fmt.IGNORED


def test_updates_on_a_scope_the_run_never_recorded_is_a_violation_not_a_pass():
    # A variable Keras never tracked has no row: the rule must not pass on nothing.
    rows = {"net": [1.0, 1.0, 1.0, 0.0, 0.0], "net/dense": [1.0, 1.0, 1.0, 0.0, 0.0]}
    (event,) = rules.check_stats([rules.updates("task", "net/raw/*")], 0, _grads(rows, "task"))
    assert event.evidence["unmatched"] == "scope"


def test_the_recorder_gate_calls_the_host_for_an_updates_rule():
    from tb_gradscope.record._rule_gate import watched_rows

    assert watched_rows([rules.updates("td", "online/*")], ["td"], ["online"]) is None


def test_testing_assert_updates_names_the_part_that_never_trains():
    from tb_gradscope import testing

    testing.assert_updates(_flowgraph(False), "td", "online/*")
    with pytest.raises(testing.FlowContractError, match="updates\\(td, target/\\*\\)"):
        testing.assert_updates(_flowgraph(False), "td", "target/*")


def test_check_cli_fails_on_an_updates_rule_a_run_never_trains(tmp_path):
    from tests.unit.commands.test_cli_check import check

    logdir = rf.dqn_logdir(tmp_path / "logs")
    path = tmp_path / "rules.toml"
    path.write_text('rules = ["updates(td, online/*)"]\n', encoding="utf-8")
    code, out, err = check(logdir, "--rules", str(path), "--run", "clean")
    assert code == 0, (out, err)
    path.write_text('rules = ["updates(td, target/*)"]\n', encoding="utf-8")
    code, out, err = check(logdir, "--rules", str(path), "--run", "clean")
    assert code == 1, (out, err)
    assert "updates(td, target/*)" in out and "does not update scope 'target'" in out


def test_never_evidence_leaves_out_the_gradient_of_an_ignored_target():
    """never(td, agent/*) breaks on agent/online; the roll-up `agent` also sums
    the gradient of agent/target, which the optimizer never applies
    (ignored): the evidence is agent/online's own norm (issue 57, item 12)."""
    scopes = ["agent", "agent/online", "agent/target"]
    rows = {
        "agent": [2.0, 10.0**0.5, 3.0, 0.0, 0.0],
        "agent/online": [1.0, 1.0, 1.0, 0.0, 0.0],
        "agent/target": [1.0, 3.0, 3.0, 0.0, 0.0],
    }
    graph = fmt.FlowGraph(
        losses=[fmt.LossInfo("td")],
        scopes=scopes,
        cells={
            "td": {"agent": fmt.UPDATES, "agent/online": fmt.UPDATES, "agent/target": fmt.IGNORED}
        },
    )
    (event,) = rules.check_stats([rules.never("td", "agent/*")], 0, _grads(rows), flowgraph=graph)
    assert (event.scope, event.evidence["l2"]) == ("agent/online", 1.0)
