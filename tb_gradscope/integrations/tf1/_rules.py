"""Flow rules for the TF1 GraphRecorder: when to check, what to write, when to raise.

The checking is `tb_gradscope.rules.RuleChecker`'s and the argument parsing
`record.checks.resolve_rules`'s, as for the TF2 Recorder; this module only fits
them to a TF1 run:

- build time: the FlowGraph is known when the recorder is built, so it is
  checked then (`violations` holds the result at once); the violations are
  written as the EVENTS record "trace" at the step of the first train call,
  with the FlowGraph, and the policy applies there, before that call runs;
- recorded steps: a step's gradient tables arrive in one or several run calls
  (one per train op); they are checked together when the step's update window
  closes, with its UPDATE_STATS table, and written as the EVENTS record "step".

Violations are written (and flushed) before the policy applies, so "raise"
never loses them. A failure of the checking itself warns once and turns
checking off; training goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from tb_gradscope import format as fmt
from tb_gradscope.record._checks import STEP_EVENTS, TRACE_EVENTS, resolve_rules
from tb_gradscope.record._warn import warn_once
from tb_gradscope.rules import RuleChecker, apply_policy
from tb_gradscope.rules.policy import LOG

WriteBlobs = Callable[[fmt.RecordInfo, Sequence[Any], int], None]


class GraphRuleSteps:
    """A GraphRecorder's rules: checked at build time and at recorded steps.

    Args:
      rules: Rule objects, compact strings, a TOML rules file path or a RuleSet.
      on_violation: "log", "warn", "raise", or None (the rules file's policy).
      scopes: the row labels of every table.
      label: names the recorder in the warning if checking fails.
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
                ("tf1_rules_failed", self._label),
                f"tb_gradscope: GraphRecorder '{self._label}' stopped checking rules after "
                f"an error ({type(e).__name__}: {e}); training continues unaffected",
            )
            return []
        self.violations.extend(events)
        return events


def _at_step(event: fmt.Event, step: int) -> fmt.Event:
    return fmt.Event(**{**event.to_json(), "step": int(step)})


__all__ = ["GraphRuleSteps", "STEP_EVENTS", "TRACE_EVENTS"]
