"""How a TF2 demo run records: one Recorder per run, with its pairs and rules.

The Recorder writes gradient stats, applied updates, the FlowGraph, drift of
the declared target/online pairs and rule violations into one event file in
the run directory, and lists the demo's rules in the run so `tb-gradscope
check LOGDIR` finds them.

`tb_gradscope.record` is imported before `tb_gradscope.pairs` on purpose: the
two packages import each other, and only this order resolves.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tb_gradscope.demos.spec import RunSpec
from tb_gradscope.pairs import Pair
from tb_gradscope.record import Recorder  # first: see the module docstring


def recorder(
    spec: RunSpec, models: Mapping[str, Any], rules: Sequence[str], pairs: Sequence[Pair] = ()
) -> Recorder:
    """A Recorder writing to `spec.run_dir`, scopes rooted at the given model names.

    Violations are logged, never raised: the leaky twin must train to the end
    so its broken rules are on record.
    """
    return Recorder(
        logdir=spec.run_dir,
        every_n_steps=spec.record_every,
        models=dict(models),
        pairs=list(pairs) or None,
        rules=list(rules),
        on_violation="log",
    )
