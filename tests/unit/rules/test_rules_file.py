"""Rules files: TOML with compact strings or [[rule]] tables; every error names file and line."""

from __future__ import annotations

import pytest

from tb_gradscope import rules

GOOD = """\
on_violation = "raise"
rules = [
  "never(td, target/*)",
  "blocked(td, target)",
]

[[rule]]
kind = "only"
loss = "actor"
scopes = ["trunk/*", "actor_head/*"]

[[rule]]
kind = "tracks"
target = "target"
online = "online"
tau = 0.005
"""


def _write(tmp_path, text: str) -> str:
    path = tmp_path / "rules.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_compact_strings_and_tables_in_file_order(tmp_path):
    ruleset = rules.parse_rules_file(_write(tmp_path, GOOD))
    assert ruleset.on_violation == "raise"
    assert [str(r) for r in ruleset.rules] == [
        "never(td, target/*)",
        "blocked(td, target)",
        "only(actor, [trunk/*, actor_head/*])",
        "tracks(target, online, tau=0.005)",
    ]


@pytest.mark.parametrize(
    "text, line, fix",
    [
        ('rules = ["never(td, target/*)"\n', 1, "invalid TOML"),
        ("rules = []\n\n[[rule]]\nkind = never\n", 4, "invalid TOML"),
        (
            'rules = [\n  "never(td, target/*)",\n  "nevr(td, online)",\n]\n',
            3,
            "expected never(LOSS, SCOPE)",
        ),
        (
            'rules = []\n\n[[rule]]\nkind = "never"\nloss = "td"\nscope = "t"\n\n[[rule]]\nkind = "sometimes"\n',
            8,
            "use one of never",
        ),
        ('[[rule]]\nkind = "never"\nloss = "td"\n', 1, "missing scope"),
        (
            '[[rule]]\nkind = "tracks"\ntarget = "t"\nonline = "o"\ntau = "fast"\n',
            1,
            "tau must be a number",
        ),
        ('on_violation = "explode"\n', 1, "use one of log, warn, raise"),
        ('\nrule = "never(td, t)"\n', 2, "write each rule as a [[rule]] table"),
        ('\n\nnever = "td"\n', 3, "unknown key 'never'"),
    ],
)
def test_broken_file_error_names_file_and_line(tmp_path, text, line, fix):
    path = _write(tmp_path, text)
    with pytest.raises(rules.RulesFileError) as caught:
        rules.parse_rules_file(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: "), message
    assert fix in message


def test_missing_file_is_named(tmp_path):
    path = str(tmp_path / "nope.toml")
    with pytest.raises(rules.RulesFileError, match="nope.toml: cannot read rules file"):
        rules.parse_rules_file(path)


def test_binary_file_is_refused(tmp_path):
    path = tmp_path / "rules.toml"
    path.write_bytes(b"\xff\xfe\x00rules")
    with pytest.raises(rules.RulesFileError, match="not UTF-8"):
        rules.parse_rules_file(str(path))
