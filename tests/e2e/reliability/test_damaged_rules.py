"""Rule parsing follows quotes and parentheses, and refuses what it would
misread (issue 24): a list where one pattern goes, `**`."""

from __future__ import annotations

import pytest

from tb_gradscope import rules
from tb_gradscope.rules.model import Only, RuleError, parse_rule
from tb_gradscope.rules.rulesfile import RulesFileError, parse_rules_file


def test_only_keeps_a_comma_inside_a_call_and_its_quotes_in_one_name():
    rule = parse_rule('only(=HYPERLINK("http://x","c"), [a/*, b])')
    assert rule == Only('=HYPERLINK("http://x","c")', ("a/*", "b"))
    assert parse_rule(str(rule)) == rule


@pytest.mark.parametrize("text", ["never(td, [a, b])", "blocked(td, [target/*])"])
def test_never_and_blocked_refuse_a_list_of_scopes(text):
    with pytest.raises(RuleError, match="takes one scope pattern, not a list"):
        parse_rule(text)


@pytest.mark.parametrize(
    "text", ["blocked(td, **)", "never(td, target/**)", "only(td, [a, '**'])", "never(**, x)"]
)
def test_double_star_is_refused_with_what_to_write(text):
    with pytest.raises(RuleError, match=r"uses '\*\*'.*write '\*'"):
        parse_rule(text)


@pytest.mark.parametrize("text", ["never(td, a))", "never(td, (a)", "only(td, [a)])"])
def test_unbalanced_brackets_are_named(text):
    with pytest.raises(RuleError, match="unbalanced"):
        parse_rule(text)


def test_rules_file_tables_refuse_a_scope_list_and_double_star(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\nkind = "never"\nloss = "td"\nscope = ["a", "b"]\n')
    with pytest.raises(
        RulesFileError, match=r"rules.toml:1: never rule: scope is one pattern, not a list"
    ):
        parse_rules_file(path)
    path.write_text(
        'rules = ["never(td, x)"]\n\n[[rule]]\nkind = "blocked"\nloss = "td"\nscope = "**"\n'
    )
    with pytest.raises(RulesFileError, match=r"rules.toml:3: blocked rule: pattern '\*\*'"):
        parse_rules_file(path)
    assert rules.parse_rule("never(td, target/*)") == rules.never("td", "target/*")
