"""Checks `tracks(target, online, tau=, every=)` rules on a run's drift series.

A drift series is the recorder's DRIFT table for one target/online pair over
its recorded steps (rows = target scopes; `attrs` name `target` and `online`).
A tracks rule breaks when:
- no drift is recorded for its pair (the pair was never declared);
- drift is NaN/Inf at a step;
- the target never moves (`target_step` is 0 at every recorded step after the
  first), or, with `every=C`, stays still for more than 2*C steps;
- with `tau=T`, the median effective rate estimated by the recorder differs
  from T by more than half of T.
"""

from __future__ import annotations

import math
import statistics
from typing import Iterable, Mapping, Sequence

from tb_gradscope import format as fmt
from tb_gradscope.rules.model import Rule, Tracks, scope_matches

# A declared tau is met when the median estimate is within this fraction of it.
TAU_TOLERANCE = 0.5

DriftSeries = Sequence[tuple[int, fmt.Table]]


def check_drift(rules: Iterable[Rule], drift: Mapping[str, DriftSeries], step: int = 0) -> list[fmt.Event]:
    """Violations of the tracks rules among `rules`.

    Args:
      rules: any rules; only Tracks rules are checked.
      drift: {pair name: [(step, drift table)] in step order}.
      step: the step to report "pair not recorded" at (the run's last step).
    """
    events: list[fmt.Event] = []
    for rule in rules:
        if not isinstance(rule, Tracks):
            continue
        pair = _find_pair(rule, drift)
        if pair is None:
            known = sorted(drift)
            events.append(_event(rule, step, "", (
                f"no drift is recorded for target '{rule.target}' following online '{rule.online}' "
                f"(recorded pairs: {known or 'none'}); declare the pair to the Recorder"
            ), {"unmatched": "pair", "pairs": known}))
            continue
        events.extend(_check_series(rule, pair, drift[pair]))
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


def _root_row(table: fmt.Table) -> str:
    target = str(table.info.attrs.get("target", ""))
    return target if target in table else table.info.scopes[0]


def _check_series(rule: Tracks, pair: str, series: DriftSeries) -> list[fmt.Event]:
    events = []
    rows = [(step, table.row(_root_row(table))) for step, table in series]
    for step, row in rows:
        if not math.isfinite(row["drift"]):
            events.append(_event(rule, step, pair, f"drift of pair '{pair}' is {row['drift']} at step {step}",
                                 {"drift": row["drift"], "distance": row["distance"]}))
            break
    moves = [step for step, row in rows[1:] if row["target_step"] > 0]
    first, last = rows[0][0], rows[-1][0]
    if len(rows) >= 3 and not moves:
        events.append(_event(rule, last, pair, (
            f"target '{rule.target}' never moved over {len(rows)} recorded steps "
            f"({first}..{last}); drift is now {rows[-1][1]['drift']:.4g}"
        ), {"drift": rows[-1][1]["drift"], "target_step": 0.0, "recorded_steps": len(rows)}))
    elif rule.every is not None:
        previous = first
        for step in moves + [last]:
            if step - previous > 2 * rule.every:
                events.append(_event(rule, step, pair, (
                    f"target '{rule.target}' did not move for {step - previous} steps "
                    f"(after step {previous}); expected a copy every {rule.every}"
                ), {"still_steps": step - previous, "every": rule.every}))
                break
            previous = step
    if rule.tau is not None:
        estimates = [row["tau"] for _, row in rows if math.isfinite(row.get("tau", math.nan))]
        if estimates:
            median = statistics.median(estimates)
            if abs(median - rule.tau) > TAU_TOLERANCE * rule.tau:
                events.append(_event(rule, last, pair, (
                    f"target '{rule.target}' moves at an effective tau of {median:.4g}, "
                    f"not the declared {rule.tau:g}"
                ), {"tau": rule.tau, "tau_estimated": median}))
    return events


def _event(rule: Tracks, step: int, pair: str, message: str, evidence: dict) -> fmt.Event:
    return fmt.Event(
        type=fmt.VIOLATION, name=str(rule), step=int(step), message=message,
        scope=rule.target, pair=pair, evidence={"at": "step", **evidence},
    )
