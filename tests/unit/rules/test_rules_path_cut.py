"""`blocked(loss, scope, except_via=...)`: a path must be cut.

SimSiam's encoder learns through its predictor only; the loss's other path
into it (the stop_gradient branch) must stay cut. The rule reads and prints in
the compact form, parses from rules files, is checked over the FlowGraph's
scope graph, and says what is wrong in words that are right on both the
correct code and the mutant without stop_gradient."""

from __future__ import annotations

import dataclasses

import pytest

from tb_gradscope import format as fmt
from tb_gradscope import rules
from tb_gradscope.format.flowgraph import CAUSE_STOP_GRADIENT, NODE_LOSS, NODE_SCOPE
from tb_gradscope.rules.check import CAUSE_MISSING_CUT

RULE = "blocked(simsiam, enc/*, except_via=pred)"
LOSS = "loss:simsiam"


def _simsiam(cut: bool, path_cuts: bool = True, pred_path: bool = True) -> fmt.FlowGraph:
    """The FlowGraph the analysis writes for a SimSiam step (enc -> pred -> loss,
    enc -> loss through stop_gradient when `cut`)."""
    scopes = ["enc", "enc/l1", "pred", "pred/l1"]
    edges = [fmt.GraphEdge("enc/l1", LOSS, 2, ("simsiam",) if cut else ())]
    if pred_path:
        edges += [fmt.GraphEdge("enc/l1", "pred/l1", 2), fmt.GraphEdge("pred/l1", LOSS, 1)]
    blocked = []
    if cut:
        blocked = [
            fmt.BlockedEdge(
                "simsiam",
                "enc/l1/BiasAdd",
                "StopGradient",
                "StopGradient",
                "StopGradient",
                CAUSE_STOP_GRADIENT,
                "enc/l1",
                LOSS,
                fmt.SourceLine("train.py", 12, "step"),
                open_path=("enc/l1", "pred/l1", LOSS),
            )
        ]
    return fmt.FlowGraph(
        losses=[fmt.LossInfo("simsiam", optimizer="opt0")],
        scopes=scopes,
        cells={"simsiam": {s: fmt.UPDATES for s in scopes}},
        blocked_edges=blocked,
        nodes=[fmt.GraphNode(s, NODE_SCOPE, s) for s in ("enc/l1", "pred/l1")]
        + [fmt.GraphNode(LOSS, NODE_LOSS, "simsiam")],
        edges=edges,
        applied=scopes,
        path_cuts=path_cuts,
    )


@pytest.mark.parametrize(
    "text, rule",
    [
        (RULE, rules.Blocked("simsiam", "enc/*", except_via=("pred",))),
        (
            "blocked(l, enc, except_via=[pred/*, proj])",
            rules.Blocked("l", "enc", except_via=("pred/*", "proj")),
        ),
        ("blocked(l, enc, except_via='p,q')", rules.Blocked("l", "enc", except_via=("p,q",))),
    ],
)
def test_except_via_reads_and_prints_back(text, rule):
    assert rules.parse_rule(text) == rule
    assert rules.parse_rule(str(rule)) == rule
    assert rules.blocked(rule.loss, rule.scope, except_via=list(rule.except_via)) == rule


def test_a_single_pattern_in_python_is_one_pattern():
    assert rules.blocked("simsiam", "enc/*", except_via="pred").except_via == ("pred",)
    assert str(rules.blocked("simsiam", "enc/*", except_via="pred")) == RULE


@pytest.mark.parametrize(
    "text, fix",
    [
        ("blocked(l, enc, via=pred)", "except_via"),
        ("never(l, enc, except_via=pred)", "exactly two arguments"),
        ("blocked(l, enc, except_via=[])", "at least one"),
        ("blocked(l, enc, except_via=pred/**)", "a single '*'"),
    ],
)
def test_a_wrong_except_via_says_what_to_write(text, fix):
    with pytest.raises(rules.RuleError, match=None) as caught:
        rules.parse_rule(text)
    assert fix in str(caught.value)


def test_rules_file_takes_except_via_as_a_string_or_a_list(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text(
        f'rules = ["{RULE}"]\n\n[[rule]]\nkind = "blocked"\nloss = "simsiam"\nscope = "enc/*"\n'
        'except_via = ["pred", "proj"]\n'
    )
    ruleset = rules.parse_rules_file(path)
    assert ruleset.rules == (
        rules.parse_rule(RULE),
        rules.Blocked("simsiam", "enc/*", except_via=("pred", "proj")),
    )
    path.write_text('[[rule]]\nkind = "blocked"\nloss = "l"\nscope = "enc"\nexcept_via = 3\n')
    with pytest.raises(rules.RulesFileError, match=r"rules.toml:1: .*except_via"):
        rules.parse_rules_file(path)


def test_correct_simsiam_keeps_the_rule_although_the_encoder_updates():
    assert rules.check_flowgraph([rules.parse_rule(RULE)], _simsiam(cut=True)) == []


def test_plain_blocked_on_the_correct_simsiam_does_not_advise_the_cut_it_already_has():
    (event,) = rules.check_flowgraph(
        [rules.parse_rule("blocked(simsiam, enc/*)")], _simsiam(cut=True)
    )
    assert "StopGradient" in event.message and "train.py:12" in event.message
    assert "except_via" in event.message
    assert (
        "wrap the tensor leaving enc/l1 in tf.stop_gradient where loss:simsiam" not in event.message
    )


def test_mutant_without_stop_gradient_breaks_the_rule_with_stop_gradient_advice():
    (event,) = rules.check_flowgraph([rules.parse_rule(RULE)], _simsiam(cut=False))
    assert event.loss == "simsiam" and event.scope == "enc"
    assert event.evidence["cause"] == CAUSE_MISSING_CUT
    assert event.evidence["missing_cut"] == ["enc/l1", LOSS]
    assert event.evidence["path"] == ["enc/l1", LOSS]
    assert "does not pass through pred" in event.message
    assert "tf.stop_gradient" in event.message and "enc/l1 -> loss:simsiam" in event.message


def test_no_other_path_to_cut_breaks_the_rule():
    """A loss that reads the encoder only through the predictor has no path to
    cut: the cut the rule asks for is missing."""
    graph = _simsiam(cut=False)
    graph.edges = [e for e in graph.edges if e.dst != LOSS or not e.src.startswith("enc")]
    (event,) = rules.check_flowgraph([rules.parse_rule(RULE)], graph)
    assert "only through pred" in event.message


def test_a_log_from_before_per_path_cuts_cannot_check_the_rule_and_says_so():
    (event,) = rules.check_flowgraph([rules.parse_rule(RULE)], _simsiam(cut=False, path_cuts=False))
    assert event.evidence["unchecked"] == "path_cuts"
    assert "record the run again" in event.message


def test_a_mistyped_except_via_pattern_is_a_violation():
    (event,) = rules.check_flowgraph(
        [rules.parse_rule("blocked(simsiam, enc/*, except_via=prd)")], _simsiam(True)
    )
    assert event.evidence["unmatched"] == "except_via"
    assert "prd" in event.message


def test_at_a_step_gradient_into_the_encoder_keeps_the_rule():
    info = fmt.make_info(fmt.Kind.GRAD_STATS, "simsiam", ["enc", "enc/l1", "pred", "pred/l1"])
    import numpy as np

    values = np.ones((4, len(fmt.KIND_SPECS[fmt.Kind.GRAD_STATS].columns)), np.float32)
    table = fmt.Table(info, values)
    rule = rules.parse_rule(RULE)
    assert rules.check_stats([rule], 3, {"simsiam": table}, flowgraph=_simsiam(cut=True)) == []
    assert rules.check_stats([rule], 3, {"simsiam": table}) == []


def test_merged_flowgraphs_keep_path_cuts_only_when_both_have_them():
    from tb_gradscope.record._flow import merge

    other = dataclasses.replace(_simsiam(True), cells={"aux": {}}, losses=[fmt.LossInfo("aux")])
    assert merge(_simsiam(True), other).path_cuts
    assert not merge(_simsiam(True), dataclasses.replace(other, path_cuts=False)).path_cuts
