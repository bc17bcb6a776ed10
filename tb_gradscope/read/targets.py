"""Which scopes of a run are targets (target networks, EMA teachers) of which online scopes.

A run declares its pairs when it records drift (DRIFT attrs `target`,
`online`). A run that declared none may still hold a target network: sibling
scopes named like a target and its online network once the role words are
taken out (`target`/`online`, `target_net`/`eval_net`, `q_target`/`q`,
`teacher`/`student`) with the same sub-scopes are paired too, by name alone,
as `tb_gradscope.pairs._detect` pairs variables at record time (whose word lists
these are; that module imports tensorflow, this one must not).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tb_gradscope import scopes as scopes_lib
from tb_gradscope.read.flow import within

if TYPE_CHECKING:
    from tb_gradscope.read.runs import RunLogs

SEP = scopes_lib.SEPARATOR


@dataclasses.dataclass(frozen=True)
class Target:
    """A target scope and the online scope it should follow.

    `pair` is the recorded pair's name, or "" when found by name only."""

    root: str
    online: str
    pair: str = ""

    def holds(self, scope: str) -> bool:
        return within(scope, self.root)

    @property
    def teacher(self) -> bool:
        """Whether the target is named a teacher (distillation, Mean Teacher)."""
        return any("teacher" in re.findall(r"[a-z]+", seg.lower()) for seg in self.root.split(SEP))


def targets(run: RunLogs) -> list[Target]:
    """Declared pairs first, then pairs found by name among scopes no declared pair holds."""
    found = []
    for pair in run.pairs:
        root, online = pair.attrs.get("target"), pair.attrs.get("online")
        if isinstance(root, str) and root and isinstance(online, str):
            found.append(Target(root, online, pair.name))
    taken = [t.root for t in found] + [t.online for t in found]
    for target in by_name(run.scopes):
        if not any(within(target.root, s) or within(s, target.root) for s in taken):
            found.append(target)
    return found


def by_name(scopes: Sequence[str]) -> list[Target]:
    """Target/online sibling scopes, found by name (the same sub-scopes preferred)."""
    children: dict[str, set[str]] = {}
    for scope in scopes:
        parts = scope.split(SEP)
        for k in range(len(parts)):
            children.setdefault(SEP.join(parts[:k]), set()).add(parts[k])
    found: list[Target] = []
    for parent in sorted(children, key=lambda p: (p.count(SEP) if p else -1, p)):
        if any(within(parent, t.root) or within(parent, t.online) for t in found):
            continue
        kids = sorted(children[parent])
        for seg in kids:
            kind, base = scopes_lib.segment_role(seg)
            if kind != "target":
                continue
            root = _join(parent, seg)
            candidates = [_join(parent, other) for other in _online_candidates(kids, seg, base)]
            # A copy has its online network's sub-scopes; a distillation teacher
            # is often wider or deeper than its student and still its teacher.
            same = [o for o in candidates if _shape(scopes, root) == _shape(scopes, o)]
            if same or candidates:
                found.append(Target(root, (same or candidates)[0]))
    return found


def _online_candidates(kids: Iterable[str], seg: str, base: str) -> list[str]:
    out = []
    for other in kids:
        kind, other_base = scopes_lib.segment_role(other)
        if other != seg and kind != "target" and other_base == base:
            out.append((kind != "online", other))
    return [o for _, o in sorted(out)]


def _shape(scopes: Sequence[str], root: str) -> frozenset[str]:
    return frozenset(s[len(root) :] for s in scopes if within(s, root))


def _join(parent: str, seg: str) -> str:
    return f"{parent}{SEP}{seg}" if parent else seg
