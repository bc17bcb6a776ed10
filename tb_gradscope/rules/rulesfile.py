"""Rules files: TOML that lists rules, for `tb-gradscope check --rules FILE` and CI.

```toml
on_violation = "raise"                 # optional: log (default) | warn | raise
rules = ["never(td, target/*)"]        # compact form, one string per rule

[[rule]]                               # or one table per rule
kind = "only"
loss = "actor"
scopes = ["trunk/*", "actor_head/*"]

[[rule]]
kind = "tracks"
target = "target"
online = "online"
tau = 0.005

[[rule]]                               # a path that must be cut (SimSiam)
kind = "blocked"
loss = "simsiam"
scope = "enc/*"
except_via = "pred"                    # or a list of scope patterns

[[rule]]                               # what a loss must train, every recorded step
kind = "updates"
loss = "task"
scopes = ["trunk/*", "task_head/*"]
```

Every error names the file and the line to fix (`rules.toml:7: ...`).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

from tb_gradscope.rules.model import RULE_KINDS, Rule, RuleError, check_pattern, parse_rule
from tb_gradscope.rules.policy import POLICIES

_FIELDS = {
    "never": ("loss", "scope"),
    "blocked": ("loss", "scope"),
    "only": ("loss", "scopes"),
    "tracks": ("target", "online"),
    "updates": ("loss", "scopes"),
}
_OPTIONAL = {"tracks": ("tau", "every"), "blocked": ("except_via",)}
_TOP_LEVEL = {"rule", "rules", "on_violation"}
_HEADER = re.compile(r"^\s*\[\[\s*rule\s*\]\]")
_TOML_LINE = re.compile(r"\(at line (\d+), column \d+\)")


class RulesFileError(ValueError):
    """A rules file that cannot be used; the message starts with `file:line:`."""


@dataclasses.dataclass(frozen=True)
class RuleSet:
    """The rules of a file and the policy it asks for."""

    rules: tuple[Rule, ...]
    on_violation: str = "log"
    path: str = ""


def parse_rules_file(path: str | os.PathLike) -> RuleSet:
    """Reads a TOML rules file.

    Raises:
      RulesFileError: the file is missing, not TOML, or holds a rule that
        cannot be read; the message names the file and line.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise RulesFileError(f"{name}: cannot read rules file: {e.strerror}") from None
    try:
        text = raw.decode("utf-8")
        doc = tomllib.loads(text)
    except UnicodeDecodeError as e:
        raise RulesFileError(f"{name}: rules file is not UTF-8 text ({e.reason})") from None
    except tomllib.TOMLDecodeError as e:
        found = _TOML_LINE.search(str(e))
        line = found.group(1) if found else str(max(1, len(text.splitlines())))
        message = (
            _TOML_LINE.sub("", str(e)).replace("(at end of document)", "(at end of file)").strip()
        )
        raise RulesFileError(f"{name}:{line}: invalid TOML: {message}") from None
    return rules_from_document(doc, text, name)


def rules_from_document(doc: Mapping[str, Any], text: str = "", name: str = "<rules>") -> RuleSet:
    """Builds a RuleSet from a parsed TOML document; `text` locates errors by line."""
    lines = text.splitlines()
    unknown = sorted(set(doc) - _TOP_LEVEL)
    if unknown:
        key = unknown[0]
        line = _line_of(lines, r"^\s*\[*\s*" + re.escape(key) + r"\b")
        raise RulesFileError(
            f"{name}:{line}: "
            f"unknown key '{key}'; a rules file holds `rules = [...]`, "
            "`[[rule]]` tables and `on_violation`"
        )
    policy = doc.get("on_violation", "log")
    if policy not in POLICIES:
        line = _line_of(lines, r"^\s*on_violation\s*=")
        raise RulesFileError(
            f"{name}:{line}: on_violation is {policy!r}; use one of {', '.join(POLICIES)}"
        )
    rules: list[Rule] = []
    compact = doc.get("rules", [])
    if not isinstance(compact, list):
        line = _line_of(lines, r"^\s*rules\s*=")
        raise RulesFileError(
            f'{name}:{line}: `rules` must be a list of strings such as ["never(td, target/*)"]'
        )
    for item in compact:
        line = _line_of(lines, re.escape(str(item)), _line_of(lines, r"^\s*rules\s*="))
        if not isinstance(item, str):
            raise RulesFileError(
                f'{name}:{line}: rules entries are strings like "never(td, target/*)"'
            )
        try:
            rules.append(parse_rule(item))
        except RuleError as e:
            raise RulesFileError(f"{name}:{line}: {e}") from None
    tables = doc.get("rule", [])
    if not isinstance(tables, list):
        line = _line_of(lines, r"^\s*\[?\s*rule\b")
        raise RulesFileError(f"{name}:{line}: write each rule as a [[rule]] table")
    headers = [i + 1 for i, line in enumerate(lines) if _HEADER.match(line)]
    for n, table in enumerate(tables):
        line = headers[n] if n < len(headers) else 1
        try:
            rules.append(_rule_from_table(table))
        except RuleError as e:
            raise RulesFileError(f"{name}:{line}: {e}") from None
    return RuleSet(tuple(rules), policy, name)


def _rule_from_table(table: Any) -> Rule:
    if not isinstance(table, dict):
        raise RuleError("a [[rule]] entry must be a table")
    kind = table.get("kind")
    if kind not in RULE_KINDS:
        raise RuleError(f"[[rule]] kind is {kind!r}; use one of {', '.join(RULE_KINDS)}")
    required = _FIELDS[kind]
    allowed = {"kind", *required, *_OPTIONAL.get(kind, ())}
    missing = [k for k in required if k not in table]
    extra = sorted(set(table) - allowed)
    if missing or extra:
        what = f"missing {', '.join(missing)}" if missing else f"unknown key {extra[0]}"
        raise RuleError(f"{kind} rule: {what}; a {kind} rule has keys {', '.join(sorted(allowed))}")
    if kind in ("only", "updates"):
        scopes = table["scopes"]
        if isinstance(scopes, str):
            scopes = [scopes]
        if (
            not isinstance(scopes, list)
            or not scopes
            or not all(isinstance(s, str) and s for s in scopes)
        ):
            raise RuleError(f"{kind} rule: scopes must be a list of scope patterns")
        return RULE_KINDS[kind](
            _text(table, "loss"), tuple(check_pattern(s, f"{kind} rule") for s in scopes)
        )
    if kind == "tracks":
        tau, every = table.get("tau"), table.get("every")
        if tau is not None and (isinstance(tau, bool) or not isinstance(tau, (int, float))):
            raise RuleError(f"tracks rule: tau must be a number, got {tau!r}")
        if every is not None and (isinstance(every, bool) or not isinstance(every, int)):
            raise RuleError(f"tracks rule: every must be an integer, got {every!r}")
        return RULE_KINDS[kind](
            _text(table, "target"),
            _text(table, "online"),
            None if tau is None else float(tau),
            every,
        )
    if kind == "blocked" and "except_via" in table:
        via = table["except_via"]
        via = [via] if isinstance(via, str) else via
        if not isinstance(via, list) or not via or not all(isinstance(p, str) and p for p in via):
            raise RuleError(
                f"blocked rule: except_via must be a scope pattern or a list of them, got {table['except_via']!r}"
            )
        return RULE_KINDS[kind](
            _text(table, "loss"),
            _text(table, "scope"),
            tuple(check_pattern(p, "blocked rule") for p in via),
        )
    return RULE_KINDS[kind](_text(table, "loss"), _text(table, "scope"))


def _text(table: Mapping[str, Any], key: str) -> str:
    value = table[key]
    if isinstance(value, list) and key == "scope":
        raise RuleError(
            f"{table.get('kind')} rule: scope is one pattern, not a list; write one "
            f"[[rule]] per pattern"
        )
    if not isinstance(value, str) or not value:
        raise RuleError(
            f"{table.get('kind')} rule: {key} must be a non-empty string, got {value!r}"
        )
    return check_pattern(value, f"{table.get('kind')} rule")


def _line_of(lines: list[str], pattern: str, default: int = 1) -> int:
    """The first line matching `pattern` (1-based), or `default` when none does."""
    regex = re.compile(pattern)
    for i, line in enumerate(lines):
        if regex.search(line):
            return i + 1
    return default
