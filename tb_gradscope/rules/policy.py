"""What to do when a rule is broken while training: log, warn or raise.

The recorder checks rules at trace time and at recorded steps, writes the
violations to the log as EVENTS records, then calls `apply_policy` so the user
also hears about them the way they asked (`on_violation=`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence

from tb_gradscope.format import Event

LOG, WARN, RAISE = "log", "warn", "raise"
POLICIES = (LOG, WARN, RAISE)

logger = logging.getLogger("tb_gradscope.rules")


class FlowRuleWarning(UserWarning):
    """Emitted for each violation under on_violation="warn"."""


class FlowRuleViolation(Exception):
    """Raised under on_violation="raise"; `events` holds every violation seen.

    Build it with `from_events`. The constructor is Exception's own (a message)
    on purpose: autograph re-raises an error from a traced function as the same
    type only then, so users catch FlowRuleViolation inside tf.function too.
    """

    events: list = []

    @classmethod
    def from_events(cls, events: Sequence[Event]) -> FlowRuleViolation:
        listed = list(events)
        lines = "\n".join(f"  step {e.step}: {e.name}: {e.message}" for e in listed)
        error = cls(f"{len(listed)} flow rule violation(s):\n{lines}")
        error.events = listed
        return error


def apply_policy(events: Sequence[Event], on_violation: str = LOG) -> list[Event]:
    """Logs, warns about or raises on `events`; returns them for writing.

    "log" only logs (INFO on logger `tb_gradscope.rules`): the events are in the
    TensorBoard log for the tab and `tb-gradscope check`. "warn" issues one
    FlowRuleWarning per event. "raise" raises FlowRuleViolation when there is any.

    Raises:
      ValueError: `on_violation` is not one of log, warn, raise.
      FlowRuleViolation: under "raise", when `events` is not empty.
    """
    if on_violation not in POLICIES:
        raise ValueError(f"on_violation is {on_violation!r}; use one of {', '.join(POLICIES)}")
    events = list(events)
    for event in events:
        logger.info("step %d: %s: %s", event.step, event.name, event.message)
    if on_violation == WARN:
        for event in events:
            warnings.warn(
                f"step {event.step}: {event.name}: {event.message}", FlowRuleWarning, stacklevel=2
            )
    if on_violation == RAISE and events:
        raise FlowRuleViolation.from_events(events)
    return events
