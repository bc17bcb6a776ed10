"""Pairs: a target's variables matched one to one with the online ones it follows.

A `Pair` is plain data (variables, their scope names, what the user declared),
built by one of four constructors:

- `pair_prefixes(variables, target="target_net", online="eval_net")` — two
  scope prefixes in one variable list (TF1 `variable_scope`s, `tf.Module`s);
- `pair_models(target_model, online_model)` — two models, by variable order;
- `pair_ema(ema, sources)` — `tf.train.ExponentialMovingAverage` shadows;
- `detect_pairs(variables, models)` — all of the above found by structure.

Variables are matched by relative name when both sides use the same names,
else by order (Keras 3 numbers layers globally: `dense_3` vs `dense_7`), and
always checked for equal shapes. Non-trainable state (BatchNorm moving stats)
is paired too and flagged `state`, so its drift can be told apart.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.core.pairs import Pair, common_root, make_pair
from tb_gradscope.pairs import _naming as naming

SEP = scopes_lib.SEPARATOR
EMA_ROOT = "ema"


def pair_prefixes(
    variables: Sequence[Any],
    target: str = "target_net",
    online: str = "eval_net",
    tau: float | None = None,
    every: int | None = None,
    name: str | None = None,
    models: Any = None,
) -> Pair:
    """The pair of variables under scope `target` and scope `online`.

    `variables` may mix Keras 3 and tf.Variables; `models` ({root: model} or
    models) names Keras variables under their model's root, as the recorder does.
    """
    target, online = target.strip(SEP), online.strip(SEP)
    named = naming.named(variables, models)
    t_items = _under(named, target)
    o_items = _under(named, online)
    label = name or f"{target}<-{online}"
    if not t_items or not o_items:
        empty = target if not t_items else online
        raise ValueError(f"pair '{label}': {_why_empty(empty, variables, named)}")
    return make_pair(label, t_items, o_items, target, online, tau, every)


def _why_empty(prefix: str, given: Sequence[Any], named: Sequence[tuple[Any, str]]) -> str:
    """Why no given variable is under `prefix`: TF1 targets built with
    trainable=False are missing from tf.trainable_variables(), not misnamed."""
    graph = next((g for g in (getattr(v, "graph", None) for v in given) if g is not None), None)
    if graph is not None and hasattr(graph, "get_collection"):
        given_ids = {id(v) for v in given}
        others = [
            v
            for v in graph.get_collection("variables")
            if id(v) not in given_ids and scopes_lib.variable_name(v.name).startswith(prefix + SEP)
        ]
        if others:
            frozen = sum(not getattr(v, "trainable", True) for v in others)
            what = (
                f"{frozen} of them not trainable (trainable=False)"
                if frozen
                else "none of them in the list"
            )
            return (
                f"{len(others)} variable(s) exist under scope '{prefix}' but were not given ({what}); "
                "pass tf.compat.v1.global_variables(), or use "
                "tb_gradscope.integrations.tf1.pair_scopes(...)"
            )
    found = sorted({scopes_lib.ancestors(n)[0] for _, n in named})
    return (
        f"no variable under scope '{prefix}' (top-level scopes: {', '.join(found[:10]) or 'none'}); "
        "pass the prefixes your variables use"
    )


def pair_models(
    target_model: Any,
    online_model: Any,
    tau: float | None = None,
    every: int | None = None,
    name: str | None = None,
    roots: tuple[str, str] | None = None,
) -> Pair:
    """The pair of two models with the same architecture, by variable order.

    All weights are paired, BatchNorm moving statistics included. Each model's
    name is its scope root unless `roots=("target", "online")` is given.
    """
    t_root, o_root = roots or (naming.model_name(target_model), naming.model_name(online_model))
    if t_root == o_root:
        raise ValueError(
            f"both models are named '{t_root}'; pass roots=('target', 'online') "
            "to give them distinct scope roots"
        )
    t_items = naming.model_variables(t_root, target_model)
    o_items = naming.model_variables(o_root, online_model)
    if len(t_items) != len(o_items):
        raise ValueError(
            f"target model '{t_root}' has {len(t_items)} weights but online model "
            f"'{o_root}' has {len(o_items)}; pair two builds of the same architecture "
            "(build both before pairing)"
        )
    label = name or f"{t_root}<-{o_root}"
    return make_pair(label, t_items, o_items, t_root, o_root, tau, every, by_order=True)


def pair_ema(
    ema: tf.train.ExponentialMovingAverage,
    sources: Sequence[Any],
    name: str | None = None,
    root: str = EMA_ROOT,
    models: Any = None,
) -> Pair:
    """The pair of `ema`'s shadow variables (target) and their `sources` (online).

    Call after `ema.apply(...)` created the shadows. Keras 3 variables may be
    given as such (with Keras 3, `ema.apply([v.value for v in vs])`). A shadow
    is named `<root>/<source name>`, so its scope mirrors its source's. The
    declared tau is 1 - ema's decay (none when the decay is not a constant).
    """
    named = naming.named(sources, models)
    t_items, o_items = [], []
    for source, source_name in named:
        shadow = _shadow_of(ema, source)
        if shadow is None:
            raise ValueError(
                f"ExponentialMovingAverage has no shadow for '{source_name}'; call "
                f"ema.apply([...]) on it first (Keras 3: ema.apply([v.value for v in ...]))"
            )
        t_items.append((shadow, f"{root}{SEP}{source_name}"))
        o_items.append((source, source_name))
    online_root = common_root([n for _, n in o_items])
    label = name or (f"{root}<-{online_root}" if online_root else root)
    decay = getattr(ema, "decay", None)
    decay = private.ema_decay(ema) if decay is None else decay
    decay = tf.get_static_value(tf.convert_to_tensor(decay))
    tau = None if decay is None or float(decay) >= 1.0 else 1.0 - float(decay)
    return make_pair(label, t_items, o_items, root, online_root, tau, None, by_order=True)


def _shadow_of(ema: Any, source: Any) -> Any:
    for candidate in (source, getattr(source, "value", None)):
        if candidate is not None and hasattr(candidate, "ref"):
            shadow = ema.average(candidate)
            if shadow is not None:
                return shadow
    return None


def _under(named: Sequence[tuple[Any, str]], prefix: str) -> list[tuple[Any, str]]:
    head = prefix + SEP
    return [(v, n) for v, n in named if n.startswith(head) and not naming.is_slot_name(n)]


__all__ = ["EMA_ROOT", "Pair", "pair_ema", "pair_models", "pair_prefixes"]
