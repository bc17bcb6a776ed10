"""A finding: something in a run that is probably a bug, with its evidence and fix.

Plain data shared by the detectors (`read/leaks.py`, `read/health.py`), the
diagnosis that runs them (`read/findings.py`), `tb-gradscope doctor` and the
plugin's findings route. docs/HTTP_API.md documents the JSON form.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from tb_gradscope.read import idiom
from tb_gradscope.read.evidence import evidence_sentences

# Finding kinds, most specific first (a (loss, scope) named by two kinds is
# reported once, under the first).
TARGET_TRAINED = "target_trained"
TARGET_NOT_CUT = "target_not_cut"
JUDGE_TRAINED = "judge_trained"
SHARED_BY_OPTIMIZERS = "shared_by_optimizers"
VALUE_NOT_CUT = "value_not_cut"
LOSSES_FIGHTING = "losses_fighting"
PAIR_ANOMALY = "pair_anomaly"
NONFINITE = "nonfinite_gradient"
VANISHING = "vanishing_gradient"
KINDS = (
    TARGET_TRAINED,
    TARGET_NOT_CUT,
    JUDGE_TRAINED,
    SHARED_BY_OPTIMIZERS,
    VALUE_NOT_CUT,
    LOSSES_FIGHTING,
    PAIR_ANOMALY,
    NONFINITE,
    VANISHING,
)

# How bad a finding is. A leak: something trains what it must not, or a
# number or target is broken (doctor exits 1). A hazard: a gradient reaches a
# trainable target or another loss's value, but no optimizer step fed by it
# writes there today, so nothing is trained wrong yet; one var_list or
# trainable_variables away from a leak (a note: doctor exits 0 unless --strict).
LEAK = "leak"
HAZARD = "hazard"
SEVERITIES = (LEAK, HAZARD)

# `FlowGraph.source` of a run traced from TF1 graph code (`GraphRecorder`):
# its fixes are worded as assign ops and `minimize(var_list=...)`, not Keras
# calls or a GradientTape (`read.idiom` holds every framework's phrases).
TF1_SOURCE = idiom.TF1_SOURCE


@dataclasses.dataclass(frozen=True)
class Finding:
    """One diagnosis.

    Attributes:
      kind: one of KINDS.
      what: one sentence saying what was seen.
      loss: the loss at fault ("" when none is: a pair anomaly).
      scope: the scope concerned (the highest one that shows it all).
      pair: the target/online pair concerned, "" if none.
      edge: the scope-graph edge the gradient takes into the loss
        (`critic/l2 -> loss:actor`), "" when not known. (The FlowGraph keeps
        source lines only for cuts; a leak is a missing cut, so a finding
        names the edge where one belongs.)
      evidence: figures and steps that prove it (JSON-ready).
      why: why it is probably a bug.
      fix: the one-line fix.
      rule: the rule that pins the fix in CI, ready to copy ("" when no rule
        kind expresses it: numeric findings).
      first_step, last_step: the recorded steps it was first and last seen at.
      steps: how many recorded steps show it.
      severity: LEAK or HAZARD.
      partial: the run has no FlowGraph, so the finding rests on gradient
        tables alone (and on scope names): cuts, dataflow and which optimizer
        writes what were not seen.
    """

    kind: str
    what: str
    loss: str
    scope: str
    evidence: Mapping[str, Any]
    why: str
    fix: str
    rule: str
    first_step: int
    last_step: int
    steps: int
    pair: str = ""
    edge: str = ""
    severity: str = LEAK
    partial: bool = False

    def evidence_line(self) -> str:
        """When it was seen and its evidence in phrases, as `doctor` prints it
        and the tab shows it: `steps 0..195 (40 recorded); ...`."""
        seen = (
            f"steps {self.first_step}..{self.last_step} ({self.steps} recorded)"
            if self.steps
            else "trace time"
        )
        return f"{seen}; " + "; ".join(evidence_sentences(self.evidence))

    def to_json(self) -> dict[str, Any]:
        """The finding as strict JSON data (NaN/Inf as null), with its
        evidence line (`evidence_text`) worded once, here."""
        return _json_safe({**dataclasses.asdict(self), "evidence_text": self.evidence_line()})


def _json_safe(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
