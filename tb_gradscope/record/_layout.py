"""Which variables a recorder records, fixed on first use, and gradients aligned to them.

The layout comes from `models` and explicit `variables` when given, else from
the variables seen in the first recorded gradients. Once fixed it never
changes, so every table of a run has the same rows; a variable met later that
is not in it is reported once and left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _naming as naming
from tb_gradscope.core.warn import warn_once
from tb_gradscope.record import _stats as stats
from tb_gradscope.scopes import ScopeSpec


class LayoutResolver:
    """Fixes the recorded variables and scope tree, and aligns gradients to them."""

    def __init__(
        self,
        recorder: str,
        roots: Sequence[tuple[str, Any]],
        explicit: Sequence[Any] | None,
        spec: ScopeSpec | None,
    ):
        self.recorder = recorder
        self.roots = list(roots)
        self.explicit = None if explicit is None else list(explicit)
        self.spec = spec
        self.vlayout: naming.VariableLayout | None = None
        self.rollup: stats.RollUp | None = None
        self._known: set[int] = set()

    def ensure(self, seen: Sequence[Any]) -> bool:
        """Fixes the layout on first use; False if there is nothing to record yet."""
        if self.vlayout is not None:
            return True
        if self.roots or self.explicit is not None:
            named = [nv for root, m in self.roots for nv in naming.model_variables(root, m)]
            named += naming.name_variables(self.explicit or [], self.roots)
        else:
            named = [(v, naming.full_name(v)) for v in seen]
        vlayout = naming.build_variable_layout(named, self.spec)
        if not vlayout.variables:
            warn_once(
                (id(self), "no_variables"),
                f"Recorder '{self.recorder}' found no float variables to record "
                "(is the model built? are include/exclude too strict?); build the "
                "model before the first step or pass Recorder(variables=...)",
            )
            return False
        self.vlayout, self.rollup = vlayout, stats.RollUp.from_layout(vlayout.layout)
        self._known = {naming.variable_key(v) for v, _ in named}
        return True

    def ensure_given(self) -> None:
        """Fixes the layout now if models or variables were given (an eager
        block's entry copies them before any gradient says which they are)."""
        if self.vlayout is None and (self.roots or self.explicit is not None):
            self.ensure([])

    def aligned(self, loss: str, grads: Sequence[Any], variables: Sequence[Any]) -> list[Any]:
        """Gradients at their variables' layout positions (None elsewhere).

        A variable given twice has its gradients summed, as an optimizer would.
        """
        out: list[Any] = [None] * len(self.vlayout.variables)
        for grad, variable in zip(grads, variables):
            i = self.vlayout.index_of(variable)
            if i is None:
                self._unknown(loss, variable)
            elif grad is not None:
                out[i] = (
                    grad
                    if out[i] is None
                    else (tf.convert_to_tensor(out[i]) + tf.convert_to_tensor(grad))
                )
        return out

    def _unknown(self, loss: str, variable: Any) -> None:
        key = naming.variable_key(variable)
        if key in self._known:  # dropped by include/exclude: on purpose
            return
        warn_once(
            (id(self), "unknown", key),
            f"Recorder '{self.recorder}': variable '{naming.full_name(variable)}' "
            f"(loss '{loss}') is not among the recorded variables, so its "
            "gradient is not recorded; pass it in Recorder(variables=...) "
            "or its model in Recorder(models=...)",
        )
