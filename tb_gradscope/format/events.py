"""Events: violations of flow rules, anomalies of target/EMA pairs, skipped steps.

An EVENTS record holds, at a step, one JSON document per event seen there.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from tb_gradscope.format import schema
from tb_gradscope.format.metadata import FormatError

VIOLATION = "violation"
ANOMALY = "anomaly"
SKIPPED = "skipped"  # a step the optimizer did not apply (loss-scale overflow)
DROPPED = "dropped"  # recorded steps the writer could not write (disk full, logdir lost)
EVENT_TYPES = (VIOLATION, ANOMALY, SKIPPED, DROPPED)

_TEXT = (schema.is_str, "a string")
EVENT_SCHEMA = {
    "type": _TEXT,
    "name": _TEXT,
    "step": (schema.is_int, "an integer"),
    "message": _TEXT,
    "loss": _TEXT,
    "scope": _TEXT,
    "pair": _TEXT,
    "evidence": (schema.is_object, "an object"),
}


@dataclasses.dataclass(frozen=True)
class Event:
    """Something wrong seen at a step.

    Attributes:
      type: VIOLATION (a rule broken), ANOMALY (a pair behaving oddly),
        SKIPPED (the loss scaler skipped the step: its gradients overflowed)
        or DROPPED (recorded steps the writer lost to a fault).
      name: the rule (`never(td, target/*)`) or anomaly name (`never_synced`).
      step: the step it was seen at.
      message: one human sentence saying what is wrong.
      loss, scope, pair: what it concerns ("" when not applicable).
      evidence: numbers and places that prove it (norms, op, source line).
    """

    type: str
    name: str
    step: int
    message: str
    loss: str = ""
    scope: str = ""
    pair: str = ""
    evidence: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> Event:
        """Reads an event document, checking every field's type.

        Raises:
          FormatError: a field is missing or of the wrong type. Fields this
            version does not know are ignored (a newer writer's optional ones).
        """
        schema.require(doc, "event document", EVENT_SCHEMA, ("type", "name", "step", "message"))
        event = cls(**{k: v for k, v in doc.items() if k in EVENT_SCHEMA})
        if event.type not in EVENT_TYPES:
            raise FormatError(f"unknown event type {event.type!r}")
        return event
