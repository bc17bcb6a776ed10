"""Finding pairs nobody declared: same structure under two sibling scopes.

Sibling scopes pair when one is named like a target and the other like its
online network once the role words are removed: `target_net`/`eval_net`,
`target`/`online`, `Critic/target_net`/`Critic/eval_net`, `tare`/`beh` (seed
03), `target_q`/`q`. A PPO's old-policy snapshot pairs with its policy (`oldpi`/`pi`,
`old_policy`/`policy`, `pi_old`/`pi`: a copy assigned before each update).
`tf.train.ExponentialMovingAverage` shadows (`<var>/ExponentialMovingAverage`)
pair with their sources. Optimizer slots are never considered.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tb_gradscope import scopes as scopes_lib
from tb_gradscope.pairs import _naming as naming
from tb_gradscope.pairs._pairs import EMA_ROOT, Pair, _common_root, _make_pair

SEP = scopes_lib.SEPARATOR
EMA_SUFFIX = "ExponentialMovingAverage"


def detect_pairs(
    variables: Sequence[Any] = (),
    models: Any = None,
    optimizers: Sequence[Any] = (),
) -> list[Pair]:
    """Every target/online pair found in `variables` (or the `models`' weights).

    Sides are matched by relative name, else by order with equal shapes (two
    Keras models whose layers were numbered apart). `optimizers`' own
    variables are left out, as are slot-like names. Returns [] when nothing
    looks like a pair.
    """
    slots = naming.optimizer_slot_keys(optimizers)
    named = [
        (v, n)
        for v, n in naming.named(variables, models)
        if naming.variable_key(v) not in slots and not naming.is_slot_name(n)
    ]
    shadows = [(v, n) for v, n in named if n.endswith(SEP + EMA_SUFFIX)]
    plain = [(v, n) for v, n in named if not n.endswith(SEP + EMA_SUFFIX)]
    found = _structure_pairs(plain)
    ema = _shadow_pair(shadows, plain)
    return found + ([ema] if ema is not None else [])


def _structure_pairs(named: Sequence[tuple[Any, str]]) -> list[Pair]:
    children: dict[str, dict[str, list[tuple[Any, str]]]] = {}
    for v, n in named:
        parts = n.split(SEP)
        for k in range(len(parts) - 1):
            parent = SEP.join(parts[:k])
            children.setdefault(parent, {}).setdefault(parts[k], []).append((v, n))
    pairs: list[Pair] = []
    taken: list[str] = []
    for parent in sorted(children, key=lambda p: (p.count(SEP) if p else -1, p)):
        if any(_within(parent, t) for t in taken):
            continue
        kids = children[parent]
        for t_seg in sorted(kids):
            t_kind, t_base = scopes_lib.segment_role(t_seg)
            snapshot_of = _snapshot_of(t_seg)
            if t_kind != "target" and snapshot_of not in kids:
                continue
            t_scope = f"{parent}{SEP}{t_seg}" if parent else t_seg
            if any(_within(t_scope, t) for t in taken):
                continue
            candidates = (
                [snapshot_of] if t_kind != "target" else _online_candidates(kids, t_seg, t_base)
            )
            for o_seg in candidates:
                o_scope = f"{parent}{SEP}{o_seg}" if parent else o_seg
                if any(_within(o_scope, t) for t in taken):
                    continue
                try:
                    pair = _make_pair(
                        f"{t_scope}<-{o_scope}",
                        kids[t_seg],
                        kids[o_seg],
                        t_scope,
                        o_scope,
                        None,
                        None,
                    )
                except ValueError:
                    continue
                pairs.append(pair)
                taken += [t_scope, o_scope]
                break
    return pairs


_SNAPSHOT = re.compile(r"old_?(?P<a>.+)|(?P<b>.+)_old", re.IGNORECASE)


def _snapshot_of(segment: str) -> str | None:
    """`pi` for a PPO old-policy snapshot named `oldpi`, `old_pi` or `pi_old`."""
    found = _SNAPSHOT.fullmatch(segment)
    return (found.group("a") or found.group("b")) if found else None


def _online_candidates(kids: dict[str, Any], t_seg: str, t_base: str) -> list[str]:
    """Siblings that could be `t_seg`'s online side, role-named ones first."""
    out = []
    for seg in sorted(kids):
        kind, base = scopes_lib.segment_role(seg)
        if seg != t_seg and kind != "target" and base == t_base:
            out.append((kind != "online", seg))
    return [seg for _, seg in sorted(out)]


def _within(scope: str, root: str) -> bool:
    return scope == root or scope.startswith(root + SEP)


def _shadow_pair(
    shadows: Sequence[tuple[Any, str]], plain: Sequence[tuple[Any, str]]
) -> Pair | None:
    by_name = {n: v for v, n in plain}
    t_items, o_items = [], []
    for shadow, name in shadows:
        source_name = name[: -len(SEP + EMA_SUFFIX)]
        source = by_name.get(source_name)
        if source is not None and tuple(source.shape) == tuple(shadow.shape):
            t_items.append((shadow, f"{EMA_ROOT}{SEP}{source_name}"))
            o_items.append((source, source_name))
    if not t_items:
        return None
    online_root = _common_root([n for _, n in o_items])
    label = f"{EMA_ROOT}<-{online_root}" if online_root else EMA_ROOT
    return _make_pair(label, t_items, o_items, EMA_ROOT, online_root, None, None, by_order=True)
