"""Flow rules for recorders whose tables reach the host as numpy: the arguments,
when to check, what to write, when to raise.

The checking is `tb_gradscope.rules.RuleChecker`'s; `resolve_rules` reads the
`rules=` / `on_violation=` arguments of every recorder (the TF2 one too);
`HostRuleSteps` fits the checks to a recorder that has its tables on the host
(the TF1 `GraphRecorder`, the PyTorch `Recorder`):

- analysis time: the FlowGraph is checked when it is known (`violations` holds
  the result at once); the violations are written as the EVENTS record
  "trace" with the FlowGraph, and the policy applies there;
- recorded steps: a step's gradient tables may arrive in several parts (TF1:
  one run call per train op); they are checked together when the step
  closes, with its UPDATE_STATS table, and written as the EVENTS record "step".

Violations are written (and flushed) before the policy applies, so "raise"
never loses them. A failure of the checking itself warns once and turns
checking off; training goes on.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tb_gradscope import format as fmt
from tb_gradscope.core.warn import warn_once
from tb_gradscope.rules import Rule, RuleChecker, apply_policy, parse_rule
from tb_gradscope.rules.policy import LOG, POLICIES
from tb_gradscope.rules.rulesfile import RuleSet, parse_rules_file

# EVENTS record names: trace-time violations are written at the step the trace
# happened, which is usually also a recorded step; apart, neither hides the other.
TRACE_EVENTS, STEP_EVENTS = "trace", "step"

WriteBlobs = Callable[[fmt.RecordInfo, Sequence[Any], int], None]


def resolve_rules(rules: Any, on_violation: str | None) -> tuple[list[Rule], str]:
    """(rules, policy) from Rule objects / compact strings, a rules-file path, or a RuleSet.

    `on_violation=None` takes the rules file's policy ("log" otherwise).
    """
    file_policy = LOG
    if isinstance(rules, (str, os.PathLike)):
        text = os.fspath(rules)
        if os.path.exists(text) or text.endswith(".toml"):
            rules = parse_rules_file(text)
        else:
            try:
                rules = [parse_rule(text)]
            except ValueError as e:
                raise ValueError(
                    f"rules={text!r} is neither a rules file nor a rule ({e}); pass a "
                    "TOML rules file path or a list such as ['never(td, target/*)']"
                ) from None
    if isinstance(rules, RuleSet):
        file_policy, rules = rules.on_violation, list(rules.rules)
    policy = file_policy if on_violation is None else on_violation
    if policy not in POLICIES:
        raise ValueError(f"on_violation is {policy!r}; use one of {', '.join(POLICIES)}")
    parsed = [parse_rule(r) if isinstance(r, str) else r for r in rules]
    if not all(isinstance(r, Rule) for r in parsed):
        raise ValueError(
            "rules must be tb_gradscope.rules objects or strings such as 'never(td, target/*)'"
        )
    return parsed, policy


class HostRuleSteps:
    """A recorder's rules, checked on the host: at analysis time and at recorded steps.

    Args:
      rules: Rule objects, compact strings, a TOML rules file path or a RuleSet.
      on_violation: "log", "warn", "raise", or None (the rules file's policy).
      scopes: the row labels of every table.
      label: names the recorder in the warning if checking fails ("GraphRecorder 'logs/x'").
    """

    def __init__(self, rules: Any, on_violation: str | None, scopes: Sequence[str], label: str):
        try:
            parsed, self.policy = resolve_rules(rules, on_violation)
        except ValueError as e:  # name the argument when the message does not
            text = str(e)
            named = text.startswith(("rules", "on_violation"))
            raise ValueError(text if named else f"rules: {text}") from None
        self.checker = RuleChecker(parsed, on_violation=LOG)  # the policy applies after writing
        self.scopes = list(scopes)
        self.violations: list[fmt.Event] = []
        self._label = label
        self._disabled = False
        self._trace_events: list[fmt.Event] = []
        self._grads: dict[int, dict[str, np.ndarray]] = {}

    @property
    def flowgraph_attrs(self) -> dict[str, Any]:
        """The FLOWGRAPH record's attrs: the rule texts, for `tb-gradscope check`."""
        return {"rules": self.checker.rule_texts} if self.checker.rules else {}

    def at_build(self, flowgraph: fmt.FlowGraph | None) -> None:
        """Checks the FlowGraph now; its violations are written at the first step."""
        if flowgraph is None or not self.checker.rules:
            return
        self._trace_events = self._safely(lambda: self.checker.at_trace(flowgraph, 0))

    def at_analysis(self, flowgraph: fmt.FlowGraph, step: int) -> list[fmt.Event]:
        """Checks a FlowGraph found at `step` now (a recorder that analyses again
        when the step changes); returns its violations, kept in `violations`."""
        if not self.checker.rules:
            return []
        return self._safely(lambda: self.checker.at_trace(flowgraph, step))

    def trace_events_at(self, step: int) -> list[fmt.Event]:
        """The build-time violations, stamped with the first train call's step."""
        events = [_at_step(e, step) for e in self._trace_events]
        self.violations[: len(self._trace_events)] = events
        self._trace_events = []
        return events

    def add_grads(self, step: int, loss: str, table: np.ndarray) -> None:
        """Keeps a recorded gradient table until its step is checked."""
        if self.checker.rules and not self._disabled:
            self._grads.setdefault(step, {})[loss] = np.asarray(table)

    def at_step(self, step: int, updates: np.ndarray | None) -> dict[int, list[fmt.Event]]:
        """{step: violations} for `step` and any earlier step still held."""
        out = {}
        for held in sorted(s for s in self._grads if s <= step):
            grads = self._grads.pop(held)
            upd = updates if held == step else None
            out[held] = self._safely(lambda: self.checker.at_step(held, grads, self.scopes, upd))
        return {s: e for s, e in out.items() if e}

    def remaining(self) -> dict[int, list[fmt.Event]]:
        """{step: violations} of every step still held (end of training)."""
        return self.at_step(max(self._grads), None) if self._grads else {}

    def write(
        self,
        write_blobs: WriteBlobs,
        events_by_step: Mapping[int, list[fmt.Event]],
        name: str = STEP_EVENTS,
    ) -> list[fmt.Event]:
        """Writes each step's violations as one EVENTS record; returns them all."""
        written = []
        for step, events in sorted(events_by_step.items()):
            write_blobs(fmt.make_info(fmt.Kind.EVENTS, name), [e.to_json() for e in events], step)
            written.extend(events)
        return written

    def apply_policy(self, events: Sequence[fmt.Event]) -> None:
        """log / warn / raise FlowRuleViolation, as the user asked."""
        if events:
            apply_policy(events, self.policy)

    def _safely(self, action: Callable[[], list[fmt.Event]]) -> list[fmt.Event]:
        if self._disabled:
            return []
        try:
            events = list(action())
        except Exception as e:  # noqa: BLE001 - checking must never break training
            self._disabled = True
            self._grads.clear()
            warn_once(
                ("host_rules_failed", self._label),
                f"tb_gradscope: {self._label} stopped checking rules after "
                f"an error ({type(e).__name__}: {e}); training continues unaffected",
            )
            return []
        self.violations.extend(events)
        return events


def _at_step(event: fmt.Event, step: int) -> fmt.Event:
    return fmt.Event(**{**event.to_json(), "step": int(step)})


__all__ = ["HostRuleSteps", "STEP_EVENTS", "TRACE_EVENTS", "resolve_rules"]
