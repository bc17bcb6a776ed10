"""Rules: expectations about where each loss's gradient may flow, and what it must train.

A rule names a loss and scope patterns. Patterns are globs over scope names
(`fnmatch`, case-sensitive). `*` crosses `/`, so `target/*` matches every scope
under `target` at every level; a pattern ending in `/*` also matches the scope it
names (`target/*` matches `target` itself), because "everything under target"
includes the variables that sit directly in `target`. Loss names are globs too
(`*` means every loss).

Each rule prints in the compact form users write in rules files and tests,
`never(td, target/*)`, and `parse_rule` reads that form back.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import math
from collections.abc import Iterable, Sequence
from typing import Any

from tb_gradscope import scopes as scopes_lib


class RuleError(ValueError):
    """A rule that cannot be understood; the message says what to write instead."""


def scope_matches(scope: str, pattern: str) -> bool:
    """Whether `scope` is selected by the glob `pattern` (see module docstring)."""
    if fnmatch.fnmatchcase(scope, pattern):
        return True
    return pattern.endswith("/*") and scope == pattern[:-2]


def loss_matches(loss: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(loss, pattern)


def outermost(scopes: Iterable[str]) -> list[str]:
    """The scopes of a set that have no ancestor in the set, in input order.

    A violation is reported once, on the highest scope that shows it: the
    roll-up already sums everything below it.
    """
    chosen = list(dict.fromkeys(scopes))
    present = set(chosen)
    return [s for s in chosen if not any(a in present for a in scopes_lib.ancestors(s)[:-1])]


@dataclasses.dataclass(frozen=True)
class Never:
    """No gradient of `loss` may reach a scope matching `scope`."""

    loss: str
    scope: str

    def __str__(self) -> str:
        return f"never({_q(self.loss)}, {_q(self.scope)})"


def _set_patterns(rule: Any, field: str, required: str = "") -> None:
    """A frozen rule's pattern field as a tuple (one string is one pattern);
    `required`: the rule's text when it needs at least one."""
    value = getattr(rule, field)
    object.__setattr__(rule, field, (value,) if isinstance(value, str) else tuple(value))
    if required and not getattr(rule, field):
        raise RuleError(f"{required} needs at least one scope pattern")


@dataclasses.dataclass(frozen=True)
class Only:
    """Gradient of `loss` may reach only scopes matching one of `scopes`.

    Everything below an allowed scope is allowed too (`ac/trunk` allows
    `ac/trunk/dense`). A roll-up that contains an allowed scope (e.g. `agent`
    above `agent/trunk`) is not itself checked: its norm includes the allowed
    child.
    """

    loss: str
    scopes: tuple[str, ...]

    def __post_init__(self):
        _set_patterns(self, "scopes", required=f"only({self.loss}, ...)")

    def allows(self, scope: str) -> bool:
        return any(scope_matches(scope, p) for p in self.scopes)

    def __str__(self) -> str:
        return f"only({_q(self.loss)}, [{', '.join(_q(s) for s in self.scopes)}])"


@dataclasses.dataclass(frozen=True)
class Blocked:
    """`loss` depends on `scope` in the forward pass, and every gradient path is cut.

    Stricter than `never`: the FlowGraph must show the cut (state `blocked`);
    `independent` (no forward dependence at all) also breaks it, since the
    expected dependence is missing.

    With `except_via` (scope patterns) the rule is about paths: every path of
    the loss's gradient into `scope` that passes through no scope matching
    `except_via` (or below one) is cut, and at least one such path exists in
    the forward pass. SimSiam's encoder learns through its predictor and its
    stop_gradient branch must stay cut: `blocked(simsiam, enc/*,
    except_via=pred)`. Checked on the FlowGraph's scope graph only (the
    gradient tables cannot tell paths apart).
    """

    loss: str
    scope: str
    except_via: tuple[str, ...] = ()

    def __post_init__(self):
        _set_patterns(self, "except_via")

    def __str__(self) -> str:
        extra = ""
        if len(self.except_via) == 1:
            extra = f", except_via={_q(self.except_via[0])}"
        elif self.except_via:
            extra = f", except_via=[{', '.join(_q(p) for p in self.except_via)}]"
        return f"blocked({_q(self.loss)}, {_q(self.scope)}{extra})"


@dataclasses.dataclass(frozen=True)
class Updates:
    """`loss` must update every scope matching one of `scopes`, at every
    recorded step of the loss: its gradient arrives (grad_vars > 0, a
    non-zero norm) and an optimizer step fed by it writes the scope (the
    FlowGraph's `updates`, not `ignored`).

    The positive rule: `never`, `only` and `blocked` say where a gradient must
    not go; a part that should train and never does (a head left out of every
    var_list, a variable Keras does not track, a swapped student) breaks no
    rule of theirs. A pattern that matches no scope breaks it too: the part
    has no row at all.
    """

    loss: str
    scopes: tuple[str, ...]

    def __post_init__(self):
        _set_patterns(self, "scopes", required=f"updates({self.loss}, ...)")

    def requires(self, scope: str) -> bool:
        return any(scope_matches(scope, p) for p in self.scopes)

    def __str__(self) -> str:
        if len(self.scopes) == 1:
            return f"updates({_q(self.loss)}, {_q(self.scopes[0])})"
        return f"updates({_q(self.loss)}, [{', '.join(_q(s) for s in self.scopes)}])"


@dataclasses.dataclass(frozen=True)
class Tracks:
    """Scope `target` follows scope `online`: EMA with rate `tau`, or a hard copy `every` steps."""

    target: str
    online: str
    tau: float | None = None
    every: int | None = None

    def __post_init__(self):
        if self.tau is not None and not (0.0 < self.tau <= 1.0 and math.isfinite(self.tau)):
            raise RuleError(f"{self}: tau must be in (0, 1], e.g. tau=0.005")
        if self.every is not None and self.every < 1:
            raise RuleError(f"{self}: every must be a positive number of steps")

    def __str__(self) -> str:
        extra = ""
        if self.tau is not None:
            extra += f", tau={self.tau:g}"
        if self.every is not None:
            extra += f", every={self.every}"
        return f"tracks({_q(self.target)}, {_q(self.online)}{extra})"


Rule = Never | Only | Blocked | Tracks | Updates
RULE_KINDS = {
    "never": Never,
    "only": Only,
    "blocked": Blocked,
    "tracks": Tracks,
    "updates": Updates,
}


def never(loss: str, scope: str) -> Never:
    return Never(loss, scope)


def only(loss: str, scopes: Sequence[str] | str) -> Only:
    return Only(loss, tuple([scopes] if isinstance(scopes, str) else scopes))


def blocked(loss: str, scope: str, except_via: Sequence[str] | str = ()) -> Blocked:
    """`blocked(loss, scope)`; with `except_via`, only the paths avoiding those scopes must be cut."""
    return Blocked(loss, scope, (except_via,) if isinstance(except_via, str) else tuple(except_via))


def updates(loss: str, scopes: Sequence[str] | str) -> Updates:
    """`updates(loss, scopes)`: the loss must train every matching scope at every recorded step."""
    return Updates(loss, tuple([scopes] if isinstance(scopes, str) else scopes))


def tracks(target: str, online: str, tau: float | None = None, every: int | None = None) -> Tracks:
    return Tracks(target, online, tau, every)


def parse_rule(text: str) -> Rule:
    """Reads the compact form: `never(td, target/*)`, `only(actor, [trunk/*, actor/*])`,
    `blocked(td, target/*)`, `blocked(simsiam, enc/*, except_via=pred)`,
    `tracks(target, online, tau=0.005)`, `updates(task, [trunk/*, head/*])`.

    Names may be quoted ("..." or '...') when they contain commas or brackets.

    Raises:
      RuleError: the text is not one of those forms.
    """
    text = text.strip()
    head, paren, rest = text.partition("(")
    kind = head.strip()
    if not paren or not rest.rstrip().endswith(")") or kind not in RULE_KINDS:
        raise RuleError(
            f"cannot read rule {text!r}: expected never(LOSS, SCOPE), "
            "only(LOSS, [SCOPE, ...]), blocked(LOSS, SCOPE[, except_via=SCOPE]), "
            "tracks(TARGET, ONLINE, tau=T, every=N) or updates(LOSS, [SCOPE, ...])"
        )
    args = _split_args(rest.rstrip()[:-1], text)
    positional = [a for a in args if not _is_keyword(a)]
    keywords = dict(_keyword(a) for a in args if _is_keyword(a))
    if kind == "only":
        return _only_from_args(positional, keywords, text)
    if kind == "updates":
        return _updates_from_args(positional, keywords, text)
    if kind == "tracks":
        return _tracks_from_args(positional, keywords, text)
    if kind == "blocked" and keywords:
        return _blocked_from_args(positional, keywords, text)
    if len(positional) != 2 or keywords:
        raise RuleError(f"rule {text!r}: {kind} takes exactly two arguments, {kind}(LOSS, SCOPE)")
    if positional[1].startswith("[") and positional[1].endswith("]"):
        raise RuleError(
            f"rule {text!r}: {kind} takes one scope pattern, not a list; write one "
            f"{kind}(LOSS, SCOPE) per pattern (or quote a name that holds brackets)"
        )
    return RULE_KINDS[kind](_pattern(positional[0], text), _pattern(positional[1], text))


def _only_from_args(positional: list[str], keywords: dict, text: str) -> Only:
    if keywords or len(positional) < 2:
        raise RuleError(f"rule {text!r}: write only(LOSS, [SCOPE, ...])")
    rest = positional[1:]
    if len(rest) == 1 and rest[0].startswith("[") and rest[0].endswith("]"):
        rest = _split_args(rest[0][1:-1], text)
    return Only(_pattern(positional[0], text), tuple(_pattern(s, text) for s in rest))


def _updates_from_args(positional: list[str], keywords: dict, text: str) -> Updates:
    if keywords or len(positional) < 2:
        raise RuleError(f"rule {text!r}: write updates(LOSS, SCOPE) or updates(LOSS, [SCOPE, ...])")
    rest = positional[1:]
    if len(rest) == 1 and rest[0].startswith("[") and rest[0].endswith("]"):
        rest = _split_args(rest[0][1:-1], text) if rest[0][1:-1].strip() else []
    if not rest:
        raise RuleError(f"rule {text!r}: updates needs at least one scope pattern")
    return Updates(_pattern(positional[0], text), tuple(_pattern(s, text) for s in rest))


def _blocked_from_args(positional: list[str], keywords: dict, text: str) -> Blocked:
    unknown = sorted(set(keywords) - {"except_via"})
    if len(positional) != 2 or unknown:
        raise RuleError(
            f"rule {text!r}: write blocked(LOSS, SCOPE) or blocked(LOSS, SCOPE, except_via=SCOPE)"
        )
    value = keywords["except_via"]
    if value.startswith("[") and value.endswith("]"):
        patterns = _split_args(value[1:-1], text) if value[1:-1].strip() else []
    else:
        patterns = [value]
    if not patterns:
        raise RuleError(
            f"rule {text!r}: except_via needs at least one scope pattern, e.g. except_via=pred"
        )
    return Blocked(
        _pattern(positional[0], text),
        _pattern(positional[1], text),
        tuple(_pattern(p, text) for p in patterns),
    )


def _tracks_from_args(positional: list[str], keywords: dict, text: str) -> Tracks:
    unknown = sorted(set(keywords) - {"tau", "every"})
    if len(positional) != 2 or unknown:
        raise RuleError(f"rule {text!r}: write tracks(TARGET, ONLINE, tau=T, every=N)")
    try:
        tau = float(keywords["tau"]) if "tau" in keywords else None
        every = int(keywords["every"]) if "every" in keywords else None
    except ValueError:
        raise RuleError(f"rule {text!r}: tau must be a number and every an integer") from None
    return Tracks(_pattern(positional[0], text), _pattern(positional[1], text), tau, every)


_OPENING = {"[": "]", "(": ")"}


def _split_args(body: str, text: str) -> list[str]:
    """Splits on commas outside quotes, brackets and parentheses, so
    `=HYPERLINK("http://x","c")` stays one argument."""
    args, current, closers, quote = [], "", [], ""
    for ch in body:
        if quote:
            current += ch
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
            current += ch
        elif ch in _OPENING:
            closers.append(_OPENING[ch])
            current += ch
        elif ch in "])":
            if not closers or closers.pop() != ch:
                raise RuleError(f"rule {text!r}: unbalanced {ch!r}; quote names that hold brackets")
            current += ch
        elif ch == "," and not closers:
            args.append(current.strip())
            current = ""
        else:
            current += ch
    if quote or closers:
        raise RuleError(f"rule {text!r}: unbalanced quote or bracket")
    if current.strip():
        args.append(current.strip())
    if any(not a for a in args):
        raise RuleError(f"rule {text!r}: empty argument")
    return args


def _is_keyword(arg: str) -> bool:
    name, eq, _ = arg.partition("=")
    return bool(eq) and name.strip().isidentifier()


def _keyword(arg: str) -> tuple[str, str]:
    """(name, value); a quoted value unquoted, a [list] left for its rule to split."""
    name, _, value = arg.partition("=")
    value = value.strip()
    return name.strip(), value if value.startswith("[") else _unquote(value)


def _q(name: str) -> str:
    """A name as written in the compact form: quoted when it would not read back."""
    if name and name == name.strip() and not any(c in name for c in ",[]()\"'="):
        return name
    return f"'{name}'" if "'" not in name else f'"{name}"'


def _pattern(arg: str, text: str) -> str:
    """A name or glob argument of a rule's compact form, unquoted and checked."""
    return check_pattern(_unquote(arg), f"rule {text!r}")


def check_pattern(pattern: str, where: str) -> str:
    """`pattern`, unless it holds `**`: a single `*` already crosses `/`, and a
    user writing `**` means something globs here do not do.

    Raises:
      RuleError: naming `where` (the rule or file line) and what to write.
    """
    if "**" in pattern:
        raise RuleError(
            f"{where}: pattern {pattern!r} uses '**'; a single '*' already matches "
            "across '/' (target/* is everything under target): write '*'"
        )
    return pattern


def _unquote(arg: str) -> str:
    arg = arg.strip()
    if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "\"'":
        return arg[1:-1]
    return arg
