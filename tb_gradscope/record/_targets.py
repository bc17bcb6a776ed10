"""The recorder's target/online pairs: a DriftMonitor on the recorder's step and sink.

`Recorder(pairs=...)` takes `tb_gradscope.pairs.Pair`s or "auto" (pairs found by
`detect_pairs` over the recorder's models and variables). The monitor counts
steps with the recorder's `step` and writes through the recorder's sink, so a
run directory holds one event file (TensorBoard's Python loader misses records
of two files written side by side in one directory).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tb_gradscope import _naming as naming
from tb_gradscope.core.pairs import Pair
from tb_gradscope.core.warn import warn_once
from tb_gradscope.pairs._detect import detect_pairs
from tb_gradscope.record._drift_monitor import DriftMonitor
from tb_gradscope.record._writing import SummarySink

AUTO = "auto"


def resolve_pairs(
    pairs: Any, models: Any, variables: Sequence[Any] | None, recorder: str
) -> list[Pair]:
    """The Pairs to watch: given ones (checked), or those detected for "auto"."""
    if pairs is None:
        return []
    if isinstance(pairs, str):
        if pairs != AUTO:
            raise ValueError(
                f"pairs={pairs!r}: pass a list of Pair, or pairs='auto' to detect them"
            )
        found = detect_pairs(variables=list(variables or ()), models=models)
        if not found:
            warn_once(
                ("no_pairs", recorder),
                f"Recorder '{recorder}': pairs='auto' found no target/online pair among "
                "the recorded variables (are the models built? named like target/online?); "
                "declare them with tb_gradscope.pairs.pair_models(...)",
            )
        return found
    if isinstance(pairs, Pair):
        pairs = [pairs]
    pairs = list(pairs)
    if not all(isinstance(p, Pair) for p in pairs):
        raise ValueError(
            "pairs must be tb_gradscope.pairs.Pair objects (pair_models, pair_prefixes, "
            "pair_ema, detect_pairs) or 'auto', e.g. pairs=[pair_models(target, online, tau=0.005)]"
        )
    names = _recorded_names(models)
    return [_named_as_recorded(p, names) for p in pairs]


def _recorded_names(models: Any) -> dict[int, str]:
    """variable key -> its full name under the recorder's `models=` roots."""
    return {
        naming.variable_key(v): name
        for root, model in naming.model_roots(models)
        for v, name in naming.model_variables(root, model)
    }


def _named_as_recorded(pair: Pair, names: dict[int, str]) -> Pair:
    """The pair with the recorder's scope names: one naming rule for the matrix
    and the drift scopes (`models={"target": net}` names `net`'s variables
    `target/...` whatever the model's own name)."""

    def renamed(variables, old_names, old_root):
        new = [names.get(naming.variable_key(v), old) for v, old in zip(variables, old_names)]
        roots = {
            n[: len(n) - len(old[len(old_root) :])]
            for n, old in zip(new, old_names)
            if old.startswith(old_root)
        }
        return tuple(new), (roots.pop() if len(roots) == 1 else old_root)

    target_names, target_root = renamed(pair.target, pair.target_names, pair.target_root)
    online_names, online_root = renamed(pair.online, pair.online_names, pair.online_root)
    if (target_names, online_names) == (pair.target_names, pair.online_names):
        return pair
    default_name = f"{pair.target_root}<-{pair.online_root}"
    name = f"{target_root}<-{online_root}" if pair.name == default_name else pair.name
    return dataclasses.replace(
        pair,
        name=name,
        target_names=target_names,
        online_names=online_names,
        target_root=target_root,
        online_root=online_root,
    )


def make_monitor(
    pairs: Sequence[Pair], sink: SummarySink, step: Any, every_n_steps: int, recorder: str
) -> DriftMonitor | None:
    """A DriftMonitor counting `step` and writing through `sink` (None without pairs)."""
    if not pairs:
        return None
    return DriftMonitor(
        list(pairs), every_n_steps=every_n_steps, step=step, sink=sink, name=f"{recorder}_drift"
    )
