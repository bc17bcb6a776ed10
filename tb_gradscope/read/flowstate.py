"""The flow state of a (loss, scope) cell at a step: one pure rule.

Combines what static analysis says (the FlowGraph cell, if any) with what the
recorder measured at that step (the loss's grad_stats row). Whether a loss
*updates* a scope is a per-(loss, scope) fact: its gradient arrives and an
optimizer step fed by this loss's gradient writes the scope (the FlowGraph's
`updates` vs `ignored`). A scope's total ||delta theta|| never decides it:
another loss's optimizer, or one the recorder never saw, may move the scope.
Shared by the plugin's matrix route and the command line; docs/HTTP_API.md
states the same rule in words.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from tb_gradscope import format as fmt

# No gradient at runtime and no FlowGraph to tell blocked from independent.
NO_GRADIENT = "no_gradient"
CELL_STATES = fmt.FLOW_STATES + (NO_GRADIENT,)

# A gradient whose L2 norm is at or below this is "vanishing".
VANISHING_L2 = 1e-12


def cell_state(
    grad: Mapping[str, float] | None,
    static_state: str | None = None,
    vanishing_l2: float = VANISHING_L2,
) -> str:
    """The flow state shown for one cell.

    Args:
      grad: the cell's grad_stats row ({column: value}), or None when the
        loss recorded nothing for this scope at this step.
      static_state: the FlowGraph's state for the cell, or None if unknown
        (no FlowGraph: an eager loop whose step was never traced).
      vanishing_l2: the L2 threshold for "vanishing".

    Returns:
      One of CELL_STATES, by the first rule that applies:
      1. no gradient (grad_vars == 0 or missing): the static state if it is
         blocked, independent or ignored (a scope outside the optimizer's
         var_list often gets no gradient computed at all); blocked if the
         static state is updates (the gradient should have arrived); else
         no_gradient;
      2. any non-finite element (nonfinite > 0 or a non-finite l2): nonfinite;
      3. l2 <= vanishing_l2: vanishing;
      4. static state ignored (no optimizer step fed by this loss writes the
         scope): ignored;
      5. otherwise: updates.
    """
    grad_vars = _finite_or_none(grad.get("grad_vars")) if grad else None
    if not grad_vars:
        if static_state in (fmt.BLOCKED, fmt.INDEPENDENT, fmt.IGNORED):
            return static_state
        if static_state == fmt.UPDATES:
            return fmt.BLOCKED
        return NO_GRADIENT
    l2 = grad.get("l2")
    nonfinite = grad.get("nonfinite")
    if (nonfinite is not None and (nonfinite > 0 or math.isnan(nonfinite))) or (
        l2 is None or not math.isfinite(l2)
    ):
        return fmt.NONFINITE
    if l2 <= vanishing_l2:
        return fmt.VANISHING
    if static_state == fmt.IGNORED:
        return fmt.IGNORED
    return fmt.UPDATES


def _finite_or_none(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None
