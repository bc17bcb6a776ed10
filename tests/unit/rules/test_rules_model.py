"""Rules read and print in the compact form, and glob scopes select what docs/RULES.md says."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_gradscope import format as fmt
from tb_gradscope import rules


@pytest.mark.parametrize(
    "text, rule",
    [
        ("never(td, target/*)", rules.Never("td", "target/*")),
        ("blocked( td , target )", rules.Blocked("td", "target")),
        ("only(actor, [trunk/*, actor_head/*])", rules.Only("actor", ("trunk/*", "actor_head/*"))),
        ("only(actor, trunk/*, actor_head)", rules.Only("actor", ("trunk/*", "actor_head"))),
        ("tracks(target, online, tau=0.005)", rules.Tracks("target", "online", tau=0.005)),
        ("tracks(target, online, every=100)", rules.Tracks("target", "online", every=100)),
        ("never('a,b', \"x[1]\")", rules.Never("a,b", "x[1]")),
    ],
)
def test_compact_form_reads_and_prints_back(text, rule):
    assert rules.parse_rule(text) == rule
    assert rules.parse_rule(str(rule)) == rule


@pytest.mark.parametrize(
    "text, fix",
    [
        ("nevr(td, target)", "expected never(LOSS, SCOPE)"),
        ("never(td)", "exactly two arguments"),
        ("only(actor)", "only(LOSS, [SCOPE, ...])"),
        ("tracks(t, o, tau=fast)", "tau must be a number"),
        ("tracks(t, o, tau=2)", "tau must be in (0, 1]"),
        ("tracks(t, o, every=0)", "every must be a positive"),
        ("never(td, [target)", "unbalanced"),
        ("never(td,, target)", "empty argument"),
    ],
)
def test_unreadable_rule_says_what_to_write(text, fix):
    with pytest.raises(rules.RuleError) as caught:
        rules.parse_rule(text)
    assert fix in str(caught.value)


# Any name the reader takes: not both quote kinds, no '**' (refused on purpose, test below).
_name = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(
    lambda s: s == s.strip() and not ("'" in s and '"' in s) and "**" not in s
)


@pytest.mark.parametrize("text", ["never(td, target/**)", "only(td, [a, **])", "blocked(**, b)"])
def test_a_double_star_pattern_is_refused_with_the_fix(text):
    with pytest.raises(rules.RuleError, match=r"a single '\*' already matches"):
        rules.parse_rule(text)


@given(loss=_name, scope=_name, scopes=st.lists(_name, min_size=1, max_size=3))
def test_any_names_survive_printing_and_reading(loss, scope, scopes):
    for rule in (
        rules.Never(loss, scope),
        rules.Blocked(loss, scope),
        rules.Only(loss, tuple(scopes)),
    ):
        assert rules.parse_rule(str(rule)) == rule


def test_glob_under_a_scope_matches_every_level_and_the_scope_itself():
    assert rules.scope_matches("target", "target/*")
    assert rules.scope_matches("target/l1", "target/*")
    assert rules.scope_matches("target/l1/bn", "target/*")
    assert not rules.scope_matches("target_net", "target/*")
    assert not rules.scope_matches("online/target", "target/*")
    assert rules.scope_matches("online/target", "*/target")
    assert not rules.scope_matches("target/l1", "target")


def test_only_allows_roll_ups_of_allowed_scopes_but_not_their_siblings():
    rule = rules.only("actor", ["agent/trunk", "agent/actor_head/*"])
    grads = _grads(
        "actor",
        {"agent": 2.0, "agent/trunk": 1.0, "agent/actor_head": 1.0, "agent/critic_head": 0.5},
    )
    events = rules.check_stats([rule], 10, grads)
    assert [(e.scope, e.evidence["l2"]) for e in events] == [("agent/critic_head", 0.5)]


def test_only_allows_the_subtree_of_an_allowed_scope():
    rule = rules.only("critic", ["ac/trunk", "ac/critic_head"])
    grads = _grads(
        "critic",
        {
            "ac": 2.0,
            "ac/trunk": 1.0,
            "ac/trunk/dense": 1.0,
            "ac/critic_head": 1.0,
            "ac/actor_head": 0.0,
            "ac/actor_head/x": 0.0,
        },
    )
    assert rules.check_stats([rule], 0, grads) == []
    grads = _grads(
        "critic", {"ac": 2.0, "ac/trunk": 1.0, "ac/actor_head": 0.3, "ac/actor_head/x": 0.3}
    )
    assert [e.scope for e in rules.check_stats([rule], 0, grads)] == ["ac/actor_head"]


def test_apply_policy_logs_warns_or_raises():
    event = fmt.Event(
        type=fmt.VIOLATION, name="never(td, target/*)", step=3, message="m", loss="td"
    )
    assert rules.apply_policy([event], "log") == [event]
    with pytest.warns(rules.FlowRuleWarning, match="step 3: never"):
        rules.apply_policy([event], "warn")
    with pytest.raises(rules.FlowRuleViolation, match="1 flow rule violation") as caught:
        rules.apply_policy([event], "raise")
    assert caught.value.events == [event]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert rules.apply_policy([], "raise") == []
    with pytest.raises(ValueError, match="use one of log, warn, raise"):
        rules.apply_policy([event], "explode")


def _grads(loss: str, l2_by_scope: dict) -> dict:
    scopes = list(l2_by_scope)
    info = fmt.make_info(fmt.Kind.GRAD_STATS, loss, scopes)
    values = [[1.0 if l2 else 0.0, l2, l2, 0.0, 0.0] for l2 in l2_by_scope.values()]
    return {loss: fmt.decode_table(info, fmt.encode_table(info, values))}


def test_every_demo_rule_string_reads_back():
    from tb_gradscope.demos import spec

    for name in spec.DEMO_NAMES:
        for text in spec.load_demo(name).rules:
            rule = rules.parse_rule(text)
            assert rules.parse_rule(str(rule)) == rule, (name, text)
