"""Evaluates `tracks(target, online, tau=, every=)` rules over a run's drift series.

A drift series is the DRIFT table of one target/online pair over its recorded
steps (rows = target scopes; `attrs` name `target` and `online`). The numbers
come from `read.anomalies`, the same analysis the Gradscope tab shows, with the rule's `tau` / `every` taking the place of what the pair
declared. A tracks rule breaks when:
- no drift is recorded for its pair (the pair was never declared);
- drift is NaN/Inf at a step;
- the pair shows any anomaly: never synced, target frozen, moved by an
  optimizer, pulled in the wrong direction, tau or copy period other than the
  rule's, BatchNorm moving statistics not tracked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

from tb_gradscope import format as fmt
from tb_gradscope.read import anomalies
from tb_gradscope.read.online_path import online_moves
from tb_gradscope.rules.model import Rule, Tracks, scope_matches

DriftSeries = Sequence[tuple[int, fmt.Table]]


def check_drift(
    rules: Iterable[Rule],
    drift: Mapping[str, DriftSeries],
    step: int = 0,
    updates: Mapping[int, fmt.Table] | None = None,
) -> list[fmt.Event]:
    """Violations of the tracks rules among `rules`.

    Args:
      rules: any rules; only Tracks rules are checked.
      drift: {pair name: [(step, drift table)]}.
      step: the step to report "pair not recorded" at (the run's last step).
      updates: the run's UPDATE tables by step (the online network's recorded
        moves, which never_synced weighs).
    """
    events: list[fmt.Event] = []
    for rule in rules:
        if not isinstance(rule, Tracks):
            continue
        pair = _find_pair(rule, drift)
        if pair is None:
            known = sorted(drift)
            events.append(
                _event(
                    rule,
                    step,
                    "",
                    rule.target,
                    (
                        f"no drift is recorded for target '{rule.target}' following online '{rule.online}' "
                        f"(recorded pairs: {known or 'none'}); declare the pair to the Recorder"
                    ),
                    {"unmatched": "pair", "pairs": known},
                )
            )
            continue
        events.extend(
            _check_series(rule, pair, sorted(drift[pair], key=lambda item: item[0]), updates)
        )
    return events


def _find_pair(rule: Tracks, drift: Mapping[str, DriftSeries]) -> str | None:
    for name, series in drift.items():
        if not series:
            continue
        attrs = series[0][1].info.attrs
        target, online = str(attrs.get("target", "")), str(attrs.get("online", ""))
        if scope_matches(target, rule.target) and scope_matches(online, rule.online):
            return name
    return None


def _check_series(
    rule: Tracks, pair: str, series: DriftSeries, updates: Mapping[int, fmt.Table] | None
) -> list[fmt.Event]:
    events = []
    first_table = series[0][1]
    root = str(first_table.info.attrs.get("target", ""))
    root = root if root in first_table else first_table.info.scopes[0]
    for step, table in series:
        row = table.row(root) if root in table else None
        if row is not None and not math.isfinite(row["drift"]):
            events.append(
                _event(
                    rule,
                    step,
                    pair,
                    root,
                    f"drift of pair '{pair}' is {row['drift']} at step {step}",
                    {"drift": row["drift"], "distance": row["distance"]},
                )
            )
            break
    attrs = dict(first_table.info.attrs)
    for key in ("tau", "every"):
        if getattr(rule, key) is not None:
            attrs[key] = getattr(rule, key)
    moves = online_moves(updates, attrs.get("online"), series[0][0])
    found = anomalies.find_anomalies(
        pair, attrs, [s for s, _ in series], [t for _, t in series], moves=moves
    )
    for anomaly in found:
        events.append(
            _event(
                rule,
                anomaly.step,
                pair,
                anomaly.scope,
                anomaly.message,
                {"anomaly": anomaly.name, **anomaly.evidence},
            )
        )
    return events


def _event(
    rule: Tracks, step: int, pair: str, scope: str, message: str, evidence: dict
) -> fmt.Event:
    return fmt.Event(
        type=fmt.VIOLATION,
        name=str(rule),
        step=int(step),
        message=message,
        scope=scope,
        pair=pair,
        evidence={"at": "step", **evidence},
    )
