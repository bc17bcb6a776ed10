"""RuleChecker: the rules piece a recorder calls while training.

The recorder owns when to check (once per traced step, at recorded steps) and
how to write the events (an EVENTS record); this object owns what to check
and the `on_violation` policy. It takes plain numpy tables, so it works from
host code after a step or from a `tf.py_function` at recorded steps:

    checker = RuleChecker(["never(td, target/*)"], on_violation="raise")
    events = checker.at_trace(flowgraph, step=0)        # after analysis
    events = checker.at_step(step, {"td": td_table}, scopes, update_table)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from tb_gradscope import format as fmt
from tb_gradscope.rules.check import check_flowgraph, check_stats
from tb_gradscope.rules.model import Rule, parse_rule
from tb_gradscope.rules.policy import LOG, POLICIES, apply_policy


class RuleChecker:
    """Checks rules at trace time and at recorded steps, applying `on_violation`.

    Args:
      rules: Rule objects or compact strings ("never(td, target/*)").
      on_violation: "log" (default), "warn" or "raise" (see `apply_policy`).

    `rule_texts` is what a recorder writes in its FLOWGRAPH record's metadata
    `attrs["rules"]`, so `tb-gradscope check` re-evaluates the same rules.
    """

    def __init__(self, rules: Iterable[Rule | str], on_violation: str = LOG):
        if on_violation not in POLICIES:
            raise ValueError(f"on_violation is {on_violation!r}; use one of {', '.join(POLICIES)}")
        self.rules = tuple(parse_rule(r) if isinstance(r, str) else r for r in rules)
        self.on_violation = on_violation
        self._flowgraph: fmt.FlowGraph | None = None

    @property
    def rule_texts(self) -> list[str]:
        return [str(r) for r in self.rules]

    def at_trace(self, flowgraph: fmt.FlowGraph, step: int = 0) -> list[fmt.Event]:
        """Violations the traced step's FlowGraph shows; remembered for `at_step`."""
        self._flowgraph = flowgraph
        return apply_policy(check_flowgraph(self.rules, flowgraph, step), self.on_violation)

    def at_step(
        self,
        step: int,
        grads: Mapping[str, Any],
        scopes: Sequence[str],
        updates: Any | None = None,
    ) -> list[fmt.Event]:
        """Violations at a recorded step.

        Args:
          step: the recorded step.
          grads: {loss: [len(scopes), 5] grad_stats array} (columns as in
            `format.KIND_SPECS[Kind.GRAD_STATS]`).
          scopes: the row labels of every table.
          updates: the [len(scopes), 2] update_stats array, if recorded.

        A rule naming a loss or scope missing from this step's tables is not
        reported here (a scope may appear later, when its variables are
        created); typos are reported by `at_trace` and `tb-gradscope check`.
        """
        tables = {
            loss: _table(fmt.Kind.GRAD_STATS, loss, scopes, values)
            for loss, values in grads.items()
        }
        update_table = (
            None if updates is None else _table(fmt.Kind.UPDATE_STATS, "", scopes, updates)
        )
        events = check_stats(self.rules, int(step), tables, update_table, self._flowgraph)
        events = [e for e in events if "unmatched" not in e.evidence]
        return apply_policy(events, self.on_violation)


def _table(kind: fmt.Kind, name: str, scopes: Sequence[str], values: Any) -> fmt.Table:
    info = fmt.make_info(kind, name, scopes)
    return fmt.decode_table(info, fmt.encode_table(info, np.asarray(values)))
