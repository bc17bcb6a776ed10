"""Violations of a run: those it recorded, plus rules evaluated over its logs.

    checked = check_run(run)   # run: a `read.runs.RunLogs` (`decode_run`)

Rules come from the caller (`check --rules FILE`) and from the run itself (the
rules it was trained with, listed in its FLOWGRAPH and GRAD_STATS records).
Each is checked against every FlowGraph the run wrote (trace time), every
recorded step's gradient tables (run time) and its drift series (tracks
rules). An evaluated violation that the run already recorded at the same step
is not repeated. `tb-gradscope check` and `report` and the plugin's violations
route all call `check_run` on the same `read.runs.RunLogs` decoding, so the
tab's Violations panel and `check` list the same violations in the same
words. Never imports tensorflow.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping, Sequence

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.read.runs import RunLogs
from tb_gradscope.read.tracks import check_drift
from tb_gradscope.rules.model import loss_matches

RECORDED, EVALUATED = "recorded", "evaluated"

# What a run without a FlowGraph lacks, and how to get it.
NO_FLOWGRAPH = (
    "run {run!r} has no FlowGraph (its training step was never traced, e.g. an eager loop): "
    "rules are checked on its gradient tables alone, so blocked(...) cannot tell a cut from no "
    "dependence, never/only cannot tell a scope outside the optimizer's variables (ignored) "
    "from one it updates, and blocked(..., except_via=...) is not checked at all (it is about "
    "paths, which only the FlowGraph shows); trace the step once with rec.analyze(step_fn, *example_args), or run "
    "it in tf.function"
)


@dataclasses.dataclass(frozen=True)
class Violation:
    """A violation seen at one or more steps of a run, reported once."""

    run: str
    event: fmt.Event  # the first occurrence
    count: int  # how many steps showed it
    last_step: int
    source: str  # RECORDED (in the log) or EVALUATED (checked now)

    def to_json(self) -> dict[str, Any]:
        """The event's fields (NaN/Inf evidence as null), how many steps
        showed it, the last one, and whether it was recorded or evaluated."""
        doc = self.event.to_json()
        doc["evidence"] = json_safe(doc["evidence"])
        return {**doc, "steps_seen": self.count, "last_step": self.last_step, "source": self.source}


@dataclasses.dataclass(frozen=True)
class RunCheck:
    """One run checked: the rules evaluated, the violations, warnings
    saying what could not be checked and how to make it checkable, and the
    rules that had nothing to check in the run (no recorded step, FlowGraph or
    drift series holds what they name)."""

    rules: list[rules_lib.Rule]
    violations: list[Violation]
    warnings: list[str]
    unchecked: list[str] = dataclasses.field(default_factory=list)

    @property
    def checked(self) -> bool:
        """Whether any rule had something to check in the run."""
        return any(str(r) not in self.unchecked for r in self.rules)


def check_run(run: RunLogs, given: Sequence[rules_lib.Rule] = ()) -> RunCheck:
    """The run's recorded violations plus `given` and its recorded rules
    evaluated over its logs, grouped (what `tb-gradscope check` prints)."""
    chosen, warnings = run_rules(run, given)
    evaluated = evaluate(run, chosen)
    unchecked = sorted({e.name for e in evaluated if "unmatched" in e.evidence})
    return RunCheck(chosen, group(run.run, run.events, evaluated), warnings, unchecked)


def run_rules(run: RunLogs, given: Sequence[rules_lib.Rule]) -> tuple[list[rules_lib.Rule], list[str]]:
    """The rules to evaluate on a run: `given` plus those it recorded, and
    warnings for recorded rules that cannot be read and for evidence missing."""
    chosen = list(given)
    warnings = []
    for text in run.recorded_rules:
        try:
            rule = rules_lib.parse_rule(text)
        except rules_lib.RuleError as e:
            warnings.append(f"run {run.run!r}: ignored a recorded rule: {e}")
            continue
        if rule not in chosen:
            chosen.append(rule)
    if chosen and run.grads and not run.flowgraphs:
        warnings.append(NO_FLOWGRAPH.format(run=run.run))
    return chosen, warnings


def evaluate(run: RunLogs, rules: Sequence[rules_lib.Rule]) -> list[fmt.Event]:
    """Violations of `rules` over everything the run recorded, by step."""
    events: list[fmt.Event] = []
    if not rules:
        return events
    last = run.last_step
    for step, graph in run.flowgraphs:
        events += rules_lib.check_flowgraph(rules, graph, step)
    for step in sorted(run.grads):
        events += rules_lib.check_stats(
            rules, step, run.grads[step], run.updates.get(step), run.flowgraph_at(step)
        )
    events += check_drift(rules, run.drift, last, run.updates)
    if not run.flowgraphs and not run.grads:
        for rule in rules:
            if not isinstance(rule, rules_lib.Tracks):
                events.append(fmt.Event(
                    type=fmt.VIOLATION, name=str(rule), step=last,
                    message="cannot be checked: the run has neither a FlowGraph nor gradient tables",
                    loss=rule.loss, evidence={"at": "step", "unmatched": "run"},
                ))
    matched = _matched_in_run(run, rules)
    return [e for e in events if e.evidence.get("unmatched") not in ("loss", "scope") or e.name not in matched]


def _matched_in_run(run: RunLogs, rules: Sequence[rules_lib.Rule]) -> set[str]:
    """Rules whose loss and scope patterns match somewhere in the run: a step
    recorded before a scope existed (its layout lacked it) is no typo."""
    losses = {l for _, g in run.flowgraphs for l in g.cells} | {l for t in run.grads.values() for l in t}
    scopes = {s for _, g in run.flowgraphs for s in g.scopes}
    layouts = {t.info.scopes for tables in run.grads.values() for t in tables.values()}
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


def group(run: str, recorded: Iterable[fmt.Event], evaluated: Iterable[fmt.Event]) -> list[Violation]:
    """Groups violations by (rule, loss, scope, pair, when checked) into one
    violation each, first step first; evaluated ones already recorded are dropped."""
    recorded = [e for e in recorded if e.type == fmt.VIOLATION]
    seen = {(e.name, e.loss, e.scope, e.step) for e in recorded}
    fresh = [e for e in evaluated if (e.name, e.loss, e.scope, e.step) not in seen]
    groups: dict[tuple, list[fmt.Event]] = {}
    sources: dict[tuple, str] = {}
    for source, events in ((RECORDED, recorded), (EVALUATED, fresh)):
        for event in events:
            at = "" if "unmatched" in event.evidence else str(event.evidence.get("at", ""))
            key = (event.name, event.loss, event.scope, event.pair, at, source)
            groups.setdefault(key, []).append(event)
            sources[key] = source
    result = []
    for key, events in groups.items():
        events.sort(key=lambda e: e.step)
        result.append(Violation(run, events[0], len({e.step for e in events}), events[-1].step, sources[key]))
    result.sort(key=lambda v: (v.event.step, v.event.name, v.event.loss, v.event.scope))
    return result


def drop_inapplicable(
    per_run: dict[str, list[Violation]], given: Iterable[rules_lib.Rule]
) -> tuple[dict[str, list[Violation]], list[str]]:
    """A given rule (from --rules, checked on every run) that names a loss or
    scope missing from some runs but present in others does not apply to those
    runs; it is an error only when it matches in no run at all (a typo).
    Returns the kept violations and a note per skip."""
    unmatched: dict[str, set[str]] = {}
    for run, found in per_run.items():
        for v in found:
            if v.source == EVALUATED and "unmatched" in v.event.evidence:
                unmatched.setdefault(v.event.name, set()).add(run)
    notes = []
    given_names = {str(r) for r in given}
    applies_somewhere = {
        name for name, runs in unmatched.items() if name in given_names and len(runs) < len(per_run)
    }
    kept = {}
    for run, found in per_run.items():
        kept[run] = []
        for v in found:
            if v.source == EVALUATED and "unmatched" in v.event.evidence and v.event.name in applies_somewhere:
                notes.append(f"run {run}: rule {v.event.name} does not apply ({v.event.message})")
                continue
            kept[run].append(v)
    return kept, notes


def json_safe(value: Any) -> Any:
    """`value` with every non-finite float as None (strict JSON), recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
