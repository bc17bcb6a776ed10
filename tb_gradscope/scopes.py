"""Scopes: the tree of variable names that rows of every table refer to.

`online/l1/kernel` belongs to leaf scope `online/l1`, which rolls up into
`online`. A variable without a parent (`bias`) is its own scope. Pure Python:
the recorder, the analysis and the readers all agree on scopes through here.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
from collections.abc import Callable, Iterable, Sequence

SEPARATOR = "/"


def variable_name(name: str) -> str:
    """A variable's name without TF's output suffix (`Agent/w1:0` -> `Agent/w1`)."""
    head, sep, tail = name.rpartition(":")
    return head if sep and tail.isdigit() else name


def leaf_scope(name: str) -> str:
    """The scope a variable belongs to: its parent path, or itself at top level."""
    name = variable_name(name)
    parent, sep, _ = name.rpartition(SEPARATOR)
    return parent if sep and parent else name


def ancestors(scope: str) -> list[str]:
    """`a/b/c` -> [`a`, `a/b`, `a/b/c`] (the scope itself last)."""
    parts = [p for p in scope.split(SEPARATOR)]
    return [SEPARATOR.join(parts[: i + 1]) for i in range(len(parts))]


def depth(scope: str) -> int:
    return scope.count(SEPARATOR) + 1


def parent(scope: str) -> str | None:
    head, sep, _ = scope.rpartition(SEPARATOR)
    return head if sep else None


@dataclasses.dataclass(frozen=True)
class ScopeSpec:
    """How variables map to scopes, chosen by the user.

    Attributes:
      include: glob patterns over scopes; a variable is kept when its leaf
        scope or any ancestor matches one (empty: keep all).
      exclude: glob patterns; a variable whose leaf scope or any ancestor
        matches one is dropped.
      max_depth: scopes deeper than this roll up into their ancestor at this
        depth (None: no cap). Keeps a 10,000-variable model readable.
      mapping: optional callable from variable name to leaf scope, replacing
        `leaf_scope`.
    """

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_depth: int | None = None
    mapping: Callable[[str], str] | None = None

    def __post_init__(self):
        if self.max_depth is not None and self.max_depth < 1:
            raise ValueError(f"max_depth must be >= 1, got {self.max_depth}")


@dataclasses.dataclass(frozen=True)
class ScopeLayout:
    """Variables assigned to scopes.

    Attributes:
      scopes: every scope of the tree, parents before children, siblings sorted.
      variable_names: the variables kept, in the caller's order.
      variable_leaf: the leaf scope of each kept variable (after the depth cap).
      members: for each scope (same order as `scopes`), the indices into
        `variable_names` of every variable under it, roll-ups included.
      dropped: names of variables excluded by the spec.
    """

    scopes: tuple[str, ...]
    variable_names: tuple[str, ...]
    variable_leaf: tuple[str, ...]
    members: tuple[tuple[int, ...], ...]
    dropped: tuple[str, ...] = ()

    def index(self, scope: str) -> int:
        return self.scopes.index(scope)

    @property
    def leaves(self) -> tuple[str, ...]:
        return tuple(sorted(set(self.variable_leaf)))


def build_layout(names: Sequence[str], spec: ScopeSpec | None = None) -> ScopeLayout:
    """Assigns variable names to the scope tree according to `spec`.

    Raises:
      ValueError: a user mapping returned something other than a non-empty str.
    """
    spec = spec or ScopeSpec()
    kept: list[str] = []
    leaves: list[str] = []
    dropped: list[str] = []
    for name in names:
        leaf = _leaf_for(name, spec)
        chain = ancestors(leaf)
        if spec.include and not _any_match(chain, spec.include):
            dropped.append(name)
            continue
        if spec.exclude and _any_match(chain, spec.exclude):
            dropped.append(name)
            continue
        if spec.max_depth is not None and len(chain) > spec.max_depth:
            leaf = chain[spec.max_depth - 1]
        kept.append(variable_name(name))
        leaves.append(leaf)
    members: dict[str, list[int]] = {}
    for i, leaf in enumerate(leaves):
        for scope in ancestors(leaf):
            members.setdefault(scope, []).append(i)
    scopes = tree_order(members)
    return ScopeLayout(
        scopes=tuple(scopes),
        variable_names=tuple(kept),
        variable_leaf=tuple(leaves),
        members=tuple(tuple(members[s]) for s in scopes),
        dropped=tuple(dropped),
    )


_DIGITS = re.compile(r"(\d+)")


def tree_order(scopes: Iterable[str]) -> list[str]:
    """Scopes sorted so that each parent comes right before its subtree, numbers
    in names in numeric order (`block_8` before `block_10`)."""
    return sorted(set(scopes), key=lambda s: [_natural(part) for part in s.split(SEPARATOR)])


def _natural(part: str) -> list[tuple[int, int, str]]:
    """A sort key reading the digit runs of a name as numbers."""
    return [(0, int(t), t) if t.isdigit() else (1, 0, t) for t in _DIGITS.split(part) if t]


def _leaf_for(name: str, spec: ScopeSpec) -> str:
    if spec.mapping is None:
        return leaf_scope(name)
    leaf = spec.mapping(variable_name(name))
    if not isinstance(leaf, str) or not leaf:
        raise ValueError(
            f"scope mapping returned {leaf!r} for variable '{name}'; "
            "it must return a non-empty scope name such as 'online/l1'"
        )
    return leaf.strip(SEPARATOR) or leaf


def _any_match(chain: Iterable[str], patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(s, p) for s in chain for p in patterns)


# Words that mark a scope segment as a target/EMA copy or as the network it
# follows (`target_net` / `eval_net`, `teacher` / `student`): shared by pair
# detection on the write side and doctor's target scopes on the read side.
TARGET_WORDS = frozenset(
    {
        "target",
        "targets",
        "tgt",
        "targ",
        "tare",
        "ema",
        "avg",
        "average",
        "polyak",
        "shadow",
        "slow",
        "teacher",
        "momentum",
    }
)
ONLINE_WORDS = frozenset(
    {
        "online",
        "eval",
        "evaluate",
        "evaluation",
        "main",
        "behavior",
        "behaviour",
        "beh",
        "local",
        "current",
        "student",
        "fast",
        "learner",
        "policy",
    }
)
_WORD = re.compile(r"[A-Za-z]+[0-9]*|[0-9]+")


def segment_role(segment: str) -> tuple[str, str]:
    """('target' | 'online' | '', the segment's words without role words) of a scope segment."""
    tokens = [t.lower() for t in _WORD.findall(segment)]
    kind = (
        "target"
        if any(t in TARGET_WORDS for t in tokens)
        else ("online" if any(t in ONLINE_WORDS for t in tokens) else "")
    )
    return kind, "_".join(t for t in tokens if t not in TARGET_WORDS and t not in ONLINE_WORDS)
