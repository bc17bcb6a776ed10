"""Violations of a run: those it recorded, plus rules evaluated over its logs.

Rules come from `--rules FILE` and from the run itself (the rules it was
trained with, listed in its FLOWGRAPH record). Each is checked against every
FlowGraph the run wrote (trace time), every recorded step's gradient tables
(run time) and its drift series (tracks rules). An evaluated violation that the
run already recorded at the same step is not repeated.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.commands.logs import RunLogs
from tb_gradscope.rules.model import loss_matches


# What a run without a FlowGraph lacks, and how to get it.
NO_FLOWGRAPH = (
    "run {run!r} has no FlowGraph (its training step was never traced, e.g. an eager loop): "
    "rules are checked on its gradient tables alone, so blocked(...) cannot tell a cut from no "
    "dependence and never/only cannot tell a scope outside the optimizer's variables (ignored) "
    "from one it updates; trace the step once with rec.analyze(step_fn, *example_args), or run "
    "it in tf.function"
)


@dataclasses.dataclass(frozen=True)
class Finding:
    """A violation seen at one or more steps of a run, reported once."""

    run: str
    event: fmt.Event  # the first occurrence
    count: int  # how many steps showed it
    last_step: int
    source: str  # "recorded" (in the log) or "evaluated" (checked now)


def run_rules(logs: RunLogs, given: Sequence[rules_lib.Rule]) -> tuple[list[rules_lib.Rule], list[str]]:
    """The rules to evaluate on a run: `given` plus those it recorded, and
    warnings for recorded rules that cannot be read."""
    chosen = list(given)
    warnings = []
    for text in logs.recorded_rules:
        try:
            rule = rules_lib.parse_rule(text)
        except rules_lib.RuleError as e:
            warnings.append(f"run {logs.run!r}: ignored a recorded rule: {e}")
            continue
        if rule not in chosen:
            chosen.append(rule)
    if chosen and logs.grads and not logs.flowgraphs:
        warnings.append(NO_FLOWGRAPH.format(run=logs.run))
    return chosen, warnings


def evaluate(logs: RunLogs, rules: Sequence[rules_lib.Rule]) -> list[fmt.Event]:
    """Violations of `rules` over everything the run recorded, by step."""
    events: list[fmt.Event] = []
    if not rules:
        return events
    for step, graph in logs.flowgraphs:
        events += rules_lib.check_flowgraph(rules, graph, step)
    for step in sorted(logs.grads):
        events += rules_lib.check_stats(
            rules, step, logs.grads[step], logs.updates.get(step), logs.flowgraph_at(step)
        )
    events += rules_lib.check_drift(rules, logs.drift, logs.last_step)
    if not logs.flowgraphs and not logs.grads:
        for rule in rules:
            if not isinstance(rule, rules_lib.Tracks):
                events.append(fmt.Event(
                    type=fmt.VIOLATION, name=str(rule), step=logs.last_step,
                    message="cannot be checked: the run has neither a FlowGraph nor gradient tables",
                    loss=rule.loss, evidence={"at": "step", "unmatched": "run"},
                ))
    matched = _matched_in_run(logs, rules)
    return [e for e in events if e.evidence.get("unmatched") not in ("loss", "scope") or e.name not in matched]


def _matched_in_run(logs: RunLogs, rules: Sequence[rules_lib.Rule]) -> set[str]:
    """Rules whose loss and scope patterns match somewhere in the run: a step
    recorded before a scope existed (its layout lacked it) is no typo."""
    losses = {l for _, g in logs.flowgraphs for l in g.cells} | {l for t in logs.grads.values() for l in t}
    scopes = {s for _, g in logs.flowgraphs for s in g.scopes}
    layouts = {t.info.scopes for tables in logs.grads.values() for t in tables.values()}
    scopes |= {s for layout in layouts for s in layout}
    found = set()
    for rule in rules:
        if isinstance(rule, rules_lib.Tracks):
            continue
        patterns = rule.scopes if isinstance(rule, rules_lib.Only) else (rule.scope,)
        if any(loss_matches(l, rule.loss) for l in losses) and any(
            rules_lib.scope_matches(s, p) for s in scopes for p in patterns
        ):
            found.add(str(rule))
    return found


def findings(run: str, recorded: Iterable[fmt.Event], evaluated: Iterable[fmt.Event]) -> list[Finding]:
    """Groups violations by (rule, loss, scope, pair, when checked) into one
    finding each, first step first; evaluated ones already recorded are dropped."""
    recorded = [e for e in recorded if e.type == fmt.VIOLATION]
    seen = {(e.name, e.loss, e.scope, e.step) for e in recorded}
    fresh = [e for e in evaluated if (e.name, e.loss, e.scope, e.step) not in seen]
    groups: dict[tuple, list[fmt.Event]] = {}
    sources: dict[tuple, str] = {}
    for source, events in (("recorded", recorded), ("evaluated", fresh)):
        for event in events:
            at = "" if "unmatched" in event.evidence else str(event.evidence.get("at", ""))
            key = (event.name, event.loss, event.scope, event.pair, at, source)
            groups.setdefault(key, []).append(event)
            sources[key] = source
    result = []
    for key, events in groups.items():
        events.sort(key=lambda e: e.step)
        result.append(Finding(run, events[0], len({e.step for e in events}), events[-1].step, sources[key]))
    result.sort(key=lambda f: (f.event.step, f.event.name, f.event.loss, f.event.scope))
    return result


def drop_inapplicable(
    per_run: dict[str, list[Finding]], given: Iterable[rules_lib.Rule]
) -> tuple[dict[str, list[Finding]], list[str]]:
    """A given rule (from --rules, checked on every run) that names a loss or
    scope missing from some runs but present in others does not apply to those
    runs; it is an error only when it matches in no run at all (a typo).
    Returns the kept findings and a note per skip."""
    unmatched: dict[str, set[str]] = {}
    for run, found in per_run.items():
        for f in found:
            if f.source == "evaluated" and "unmatched" in f.event.evidence:
                unmatched.setdefault(f.event.name, set()).add(run)
    notes = []
    given_names = {str(r) for r in given}
    applies_somewhere = {
        name for name, runs in unmatched.items() if name in given_names and len(runs) < len(per_run)
    }
    kept = {}
    for run, found in per_run.items():
        kept[run] = []
        for f in found:
            if f.source == "evaluated" and "unmatched" in f.event.evidence and f.event.name in applies_somewhere:
                notes.append(f"run {run}: rule {f.event.name} does not apply ({f.event.message})")
                continue
            kept[run].append(f)
    return kept, notes
