"""Pairs as plain data: a target's variables matched one to one with the online ones.

Framework-free: a variable is anything with a `.shape` (a TF variable, a torch
parameter or buffer); `trainable` (TF) or `requires_grad` (torch) says whether
it is non-trainable state. Each framework's pair makers (`tb_gradscope.pairs`
for TF, `tb_gradscope.torch.pair_models`) build `Pair`s with `make_pair`; the
recorders lay a pair's target scopes out with `pair_layout`.
"""

from __future__ import annotations

import dataclasses
import numbers
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tb_gradscope import scopes as scopes_lib

SEP = scopes_lib.SEPARATOR


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


def make_pair(
    label: str,
    t_items: Sequence[tuple[Any, str]],
    o_items: Sequence[tuple[Any, str]],
    t_root: str,
    o_root: str,
    tau: float | None,
    every: int | None,
    by_order: bool = False,
    is_state: Callable[[Any], bool] | None = None,
) -> Pair:
    """A Pair of (variable, name) items, matched by relative name (else by
    order); `is_state(online variable)` flags non-trainable state (default: a
    variable whose `trainable` is False)."""
    check_schedule(label, tau, every)
    is_state = is_state or _not_trainable
    matched = None if by_order else _match_by_name(t_items, o_items, t_root, o_root)
    if matched is None:
        matched = _match_by_order(label, t_items, o_items)
    return Pair(
        name=label,
        target=tuple(t for (t, _), _ in matched),
        online=tuple(o for _, (o, _) in matched),
        target_names=tuple(tn for (_, tn), _ in matched),
        online_names=tuple(on for _, (_, on) in matched),
        state=tuple(is_state(o) for _, (o, _) in matched),
        target_root=t_root,
        online_root=o_root,
        tau=None if tau is None else float(tau),
        every=None if every is None else int(every),
    )


def check_schedule(label: str, tau: Any, every: Any) -> None:
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


def common_root(names: Sequence[str]) -> str:
    roots = {n.split(SEP)[0] for n in names if SEP in n}
    return roots.pop() if len(roots) == 1 else ""


def _not_trainable(variable: Any) -> bool:
    return not getattr(variable, "trainable", True)


def pair_layout(pair: Pair) -> scopes_lib.ScopeLayout:
    """The target scope tree; each state variable is a scope of its own.

    `target/bn/moving_mean` gets its own row (under `target/bn`), so the drift of
    BatchNorm statistics is seen apart from the trainable weights beside it.
    """
    state = set(pair.state_names)

    def leaf(name: str) -> str:
        return name if name in state else scopes_lib.leaf_scope(name)

    return scopes_lib.build_layout(pair.target_names, scopes_lib.ScopeSpec(mapping=leaf))


def online_scopes(pair: Pair, layout: scopes_lib.ScopeLayout) -> list[str]:
    """For each target scope, the online scope its variables come from ("" if mixed)."""
    state = set(pair.state_names)
    leaves = [
        on if tn in state else scopes_lib.leaf_scope(on)
        for tn, on in zip(pair.target_names, pair.online_names)
    ]
    out = []
    for members in layout.members:
        parts = [leaves[i].split(scopes_lib.SEPARATOR) for i in members]
        common = []
        for segs in zip(*parts):
            if len(set(segs)) != 1:
                break
            common.append(segs[0])
        out.append(scopes_lib.SEPARATOR.join(common))
    return out


def state_scopes(pair: Pair) -> list[str]:
    """Target scopes holding non-trainable state only (one per state variable)."""
    return list(pair.state_names)


def optimizer_var_counts(layout: scopes_lib.ScopeLayout, written: Sequence[bool]) -> np.ndarray:
    """Per scope, how many of its target variables an optimizer writes."""
    flags = np.asarray(written, dtype=np.float64)
    return np.asarray([flags[list(m)].sum() for m in layout.members], dtype=np.float64)
