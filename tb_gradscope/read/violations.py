"""Violations of a run: those it recorded, plus rules evaluated over its logs.

    checked = check_run(run)   # run: a `read.runs.RunLogs` (`decode_run`)

Rules come from the caller (`check --rules FILE`) and from the run itself (the
rules it was trained with, listed in its FLOWGRAPH and GRAD_STATS records).
Each is checked against every FlowGraph the run wrote (trace time), every
recorded step's gradient tables (run time) and its drift series (tracks
rules). An evaluated violation that the run already recorded at the same step
is not repeated. `tb-gradscope check` and `report` and the plugin's violations
route (through the plugin cache's `RunData.checked`) all call `check_run` on the same
`read.runs.RunLogs`, so the tab's Violations panel and `check` list the same
violations in the same words. Never imports tensorflow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.read.evidence import evidence_sentences
from tb_gradscope.read.tracks import check_drift
from tb_gradscope.rules.model import loss_matches

if TYPE_CHECKING:
    from tb_gradscope.read.runs import RunLogs

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
    """One broken rule for one (loss, scope, pair) of a run, reported once:
    at trace time and over the steps together, and with the rules its breach
    implies (the same loss reaching the same scope, in the same words)
    folded under it."""

    run: str
    event: fmt.Event  # the first run-time occurrence, else the trace-time one
    count: int  # how many recorded steps showed it (0: only at trace time)
    last_step: int
    source: str  # RECORDED (in the log) or EVALUATED (checked now)
    trace: bool = False  # also (or only) found in a FlowGraph
    also_breaks: tuple[str, ...] = ()  # rules implied by this breach, folded here

    @property
    def when(self) -> str:
        """ "at trace, and at 60 steps (0-295)", "at trace", "at step 5"."""
        if self.count == 0:
            return "at trace"
        steps = (
            f"at step {self.event.step}"
            if self.count == 1
            else (f"at {self.count} steps ({self.event.step}-{self.last_step})")
        )
        return f"at trace, and {steps}" if self.trace else steps

    def to_json(self) -> dict[str, Any]:
        """The event's fields (NaN/Inf evidence as null), how many steps
        showed it, the last one, whether it was recorded or evaluated, seen
        at trace time, the rules folded under it, and the evidence as sentences."""
        doc = self.event.to_json()
        doc["evidence"] = json_safe(doc["evidence"])
        return {
            **doc,
            "steps_seen": self.count,
            "last_step": self.last_step,
            "source": self.source,
            "at_trace": self.trace,
            "when": self.when,
            "also_breaks": list(self.also_breaks),
            "evidence_text": evidence_sentences(self.event.evidence),
        }


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


def run_rules(
    run: RunLogs, given: Sequence[rules_lib.Rule]
) -> tuple[list[rules_lib.Rule], list[str]]:
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
                events.append(
                    fmt.Event(
                        type=fmt.VIOLATION,
                        name=str(rule),
                        step=last,
                        message="cannot be checked: the run has neither a FlowGraph nor gradient tables",
                        loss=rule.loss,
                        evidence={"at": "step", "unmatched": "run"},
                    )
                )
    matched = _matched_in_run(run, rules)
    return [
        e
        for e in events
        if e.evidence.get("unmatched") not in ("loss", "scope") or e.name not in matched
    ]


def _matched_in_run(run: RunLogs, rules: Sequence[rules_lib.Rule]) -> set[str]:
    """Rules whose loss and scope patterns match somewhere in the run: a step
    recorded before a scope existed (its layout lacked it) is no typo."""
    losses = {loss for _, g in run.flowgraphs for loss in g.cells} | {
        loss for t in run.grads.values() for loss in t
    }
    scopes = {s for _, g in run.flowgraphs for s in g.scopes}
    layouts = {t.info.scopes for tables in run.grads.values() for t in tables.values()}
    scopes |= {s for layout in layouts for s in layout}
    found = set()
    for rule in rules:
        if isinstance(rule, rules_lib.Tracks):
            continue
        patterns = (
            rule.scopes if isinstance(rule, (rules_lib.Only, rules_lib.Updates)) else (rule.scope,)
        )
        if any(loss_matches(loss, rule.loss) for loss in losses) and any(
            rules_lib.scope_matches(s, p) for s in scopes for p in patterns
        ):
            found.add(str(rule))
    return found


# Which rule of two broken in the same words is listed, the other folded under it.
_RULE_RANK = {"never": 0, "blocked": 1, "only": 2, "tracks": 3, "updates": 4}


def group(
    run: str, recorded: Iterable[fmt.Event], evaluated: Iterable[fmt.Event]
) -> list[Violation]:
    """One violation per (rule, loss, scope, pair): its trace-time and
    run-time occurrences together, first step first; evaluated ones already
    recorded are dropped; then a rule whose every breach repeats another's
    (same loss, scope, pair, message) is folded under it."""
    recorded = [e for e in recorded if e.type == fmt.VIOLATION]
    seen = {(e.name, e.loss, e.scope, e.step, e.evidence.get("at")) for e in recorded}
    fresh = [
        e for e in evaluated if (e.name, e.loss, e.scope, e.step, e.evidence.get("at")) not in seen
    ]
    groups: dict[tuple, list[tuple[str, fmt.Event]]] = {}
    for source, events in ((RECORDED, recorded), (EVALUATED, fresh)):
        for event in events:
            # "cannot be checked" (unmatched) and checked breaches stay apart.
            key = (event.name, event.loss, event.scope, event.pair, "unmatched" in event.evidence)
            groups.setdefault(key, []).append((source, event))
    merged = [_merge(run, found) for found in groups.values()]
    result = _fold(merged)
    result.sort(
        key=lambda v: (v.event.step, _rank(v.event.name), v.event.name, v.event.loss, v.event.scope)
    )
    return result


def _merge(run: str, found: list[tuple[str, fmt.Event]]) -> Violation:
    """The occurrences of one breach as one Violation (recorded wins over evaluated)."""
    at_trace = [e for _, e in found if e.evidence.get("at") == "trace"]
    at_steps = sorted(
        (e for _, e in found if e.evidence.get("at") != "trace"), key=lambda e: e.step
    )
    first = at_steps[0] if at_steps else min(at_trace, key=lambda e: e.step)
    steps = {e.step for e in at_steps}
    source = RECORDED if any(s == RECORDED for s, _ in found) else EVALUATED
    last = max(steps) if steps else first.step
    return Violation(run, first, len(steps), last, source, trace=bool(at_trace))


def _rank(name: str) -> int:
    return _RULE_RANK.get(name.partition("(")[0].strip(), len(_RULE_RANK))


def _fold(found: list[Violation]) -> list[Violation]:
    """Folds a breach that says what another says (same loss, scope, pair and
    message, same steps) under the one with the narrower rule kind."""
    by_words: dict[tuple, list[Violation]] = {}
    for v in found:
        e = v.event
        key = (
            e.loss,
            e.scope,
            e.pair,
            e.message,
            v.count,
            v.last_step,
            v.trace,
            "unmatched" in e.evidence,
        )
        by_words.setdefault(key, []).append(v)
    result = []
    for same in by_words.values():
        same.sort(key=lambda v: (_rank(v.event.name), v.event.name))
        head, rest = same[0], same[1:]
        also = tuple(dict.fromkeys(name for v in rest for name in (v.event.name, *v.also_breaks)))
        result.append(
            dataclasses.replace(head, also_breaks=head.also_breaks + also) if also else head
        )
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
            if (
                v.source == EVALUATED
                and "unmatched" in v.event.evidence
                and v.event.name in applies_somewhere
            ):
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
