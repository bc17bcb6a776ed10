"""Target/online pairs: declare or detect them, and record their drift.

    from tb_gradscope.pairs import DriftMonitor, detect_pairs, pair_models

`pairs` builds `Pair`s (plain data), `detect` finds undeclared ones, `drift`
is the in-graph kernel and `monitor` writes one DRIFT table per pair per
recorded step. `series` is the read side (numpy only); importing this package
is cheap and pulls in tensorflow only when a training-side name is used, so
`tb_gradscope.anomalies` can run inside TensorBoard.
"""

from typing import Any

_LAZY = {
    "DriftMonitor": "tb_gradscope.pairs.monitor",
    "Pair": "tb_gradscope.pairs.pairs",
    "detect_pairs": "tb_gradscope.pairs.detect",
    "pair_ema": "tb_gradscope.pairs.pairs",
    "pair_models": "tb_gradscope.pairs.pairs",
    "pair_prefixes": "tb_gradscope.pairs.pairs",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tb_gradscope.pairs' has no attribute '{name}'")
