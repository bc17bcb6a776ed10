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

import dataclasses
import numbers
from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.pairs import _naming as naming

SEP = scopes_lib.SEPARATOR
EMA_ROOT = "ema"


@dataclasses.dataclass(frozen=True, eq=False)  # variables do not compare as booleans
class Pair:
    """A target that should follow an online network, variable by variable.

    Attributes:
      name: the pair's name (`target_net<-eval_net`), its DRIFT record's name.
      target, online: index-aligned variables (equal shapes).
      target_names, online_names: their full scope names (`target_net/l1/w`).
      state: per variable, True for non-trainable state (BatchNorm moving
        mean/variance) that a target update must copy too.
      target_root, online_root: the scope each side lives under.
      tau: the declared EMA rate (target <- (1 - tau) target + tau online).
      every: the declared hard-copy period in steps.
    """

    name: str
    target: tuple[Any, ...]
    online: tuple[Any, ...]
    target_names: tuple[str, ...]
    online_names: tuple[str, ...]
    state: tuple[bool, ...]
    target_root: str
    online_root: str
    tau: float | None = None
    every: int | None = None

    def __post_init__(self):
        sizes = {
            len(self.target),
            len(self.online),
            len(self.target_names),
            len(self.online_names),
            len(self.state),
        }
        if len(sizes) != 1 or not self.target:
            raise ValueError(
                f"pair '{self.name}' needs as many target as online variables "
                f"(got {len(self.target)} and {len(self.online)}), at least one"
            )
        for t, o, tn, on in zip(self.target, self.online, self.target_names, self.online_names):
            if tuple(t.shape) != tuple(o.shape):
                raise ValueError(
                    f"pair '{self.name}': target '{tn}' has shape {tuple(t.shape)} but "
                    f"online '{on}' has {tuple(o.shape)}; pair variables of the same network"
                )
        if self.tau is not None and not 0.0 < float(self.tau) <= 1.0:
            raise ValueError(
                f"pair '{self.name}': tau must be in (0, 1] (target <- (1 - tau) target "
                f"+ tau online), got {self.tau}"
            )
        if self.every is not None and (isinstance(self.every, bool) or int(self.every) < 1):
            raise ValueError(f"pair '{self.name}': every must be an int >= 1, got {self.every}")

    @property
    def state_names(self) -> tuple[str, ...]:
        """Target names of the non-trainable state variables."""
        return tuple(n for n, s in zip(self.target_names, self.state) if s)

    def declared(self) -> dict[str, Any]:
        """What the user declared, for the DRIFT record's attrs."""
        out: dict[str, Any] = {"target": self.target_root, "online": self.online_root}
        if self.tau is not None:
            out["tau"] = float(self.tau)
        if self.every is not None:
            out["every"] = int(self.every)
        return out


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
    return _make_pair(label, t_items, o_items, target, online, tau, every)


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
    return _make_pair(label, t_items, o_items, t_root, o_root, tau, every, by_order=True)


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
    online_root = _common_root([n for _, n in o_items])
    label = name or (f"{root}<-{online_root}" if online_root else root)
    decay = getattr(ema, "decay", None)
    decay = private.ema_decay(ema) if decay is None else decay
    decay = tf.get_static_value(tf.convert_to_tensor(decay))
    tau = None if decay is None or float(decay) >= 1.0 else 1.0 - float(decay)
    return _make_pair(label, t_items, o_items, root, online_root, tau, None, by_order=True)


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


def _make_pair(
    label: str,
    t_items: Sequence[tuple[Any, str]],
    o_items: Sequence[tuple[Any, str]],
    t_root: str,
    o_root: str,
    tau: float | None,
    every: int | None,
    by_order: bool = False,
) -> Pair:
    _check_schedule(label, tau, every)
    matched = None if by_order else _match_by_name(t_items, o_items, t_root, o_root)
    if matched is None:
        matched = _match_by_order(label, t_items, o_items)
    return Pair(
        name=label,
        target=tuple(t for (t, _), _ in matched),
        online=tuple(o for _, (o, _) in matched),
        target_names=tuple(tn for (_, tn), _ in matched),
        online_names=tuple(on for _, (_, on) in matched),
        state=tuple(not getattr(o, "trainable", True) for _, (o, _) in matched),
        target_root=t_root,
        online_root=o_root,
        tau=None if tau is None else float(tau),
        every=None if every is None else int(every),
    )


def _check_schedule(label: str, tau: Any, every: Any) -> None:
    """tau: a number in (0, 1]; every: a whole number >= 1 (either may be None)."""
    if tau is not None and (
        isinstance(tau, bool) or not isinstance(tau, numbers.Real) or not 0.0 < float(tau) <= 1.0
    ):
        raise ValueError(
            f"pair '{label}': tau must be a number in (0, 1] (target <- (1 - tau) target + tau online), "
            f"got {tau!r}"
        )
    if every is not None and (
        isinstance(every, bool) or not isinstance(every, numbers.Integral) or every < 1
    ):
        raise ValueError(
            f"pair '{label}': every must be a whole number of steps >= 1, got {every!r}"
        )


def _match_by_name(t_items, o_items, t_root, o_root):
    """Items matched on the name relative to each root, or None if names differ."""
    t_rel = {n[len(t_root) + 1 :]: (v, n) for v, n in t_items}
    o_rel = {n[len(o_root) + 1 :]: (v, n) for v, n in o_items}
    if set(t_rel) != set(o_rel) or len(t_rel) != len(t_items) or len(o_rel) != len(o_items):
        return None
    if any(tuple(t_rel[k][0].shape) != tuple(o_rel[k][0].shape) for k in t_rel):
        return None
    return [(t_rel[k], o_rel[k]) for k in (n[len(t_root) + 1 :] for _, n in t_items)]


def _match_by_order(label, t_items, o_items):
    if len(t_items) != len(o_items):
        raise ValueError(
            f"pair '{label}': {len(t_items)} target variables but {len(o_items)} online "
            "ones, and their names differ; pass the same architecture on both sides"
        )
    for (t, tn), (o, on) in zip(t_items, o_items):
        if tuple(t.shape) != tuple(o.shape):
            raise ValueError(
                f"pair '{label}': matching by order, target '{tn}' {tuple(t.shape)} "
                f"meets online '{on}' {tuple(o.shape)}; pass both sides' variables in "
                "the same order (or give them the same relative names)"
            )
    return list(zip(t_items, o_items))


def _common_root(names: Sequence[str]) -> str:
    roots = {n.split(SEP)[0] for n in names if SEP in n}
    return roots.pop() if len(roots) == 1 else ""
