"""Target/online pairs: declare them or detect them, as plain data.

    from tb_gradscope.pairs import detect_pairs, pair_models

The names above are the public API; the private modules behind them: `_pairs`
builds `Pair`s, `_detect` finds undeclared ones, `_naming` names paired
variables. Recording a pair's drift is the recorder's job
(`tb_gradscope.record.DriftMonitor`); reading drift series is the read side's
(`tb_gradscope.read.drift`, `read.anomalies`). Imports only `tb_gradscope._naming` and
`scopes`, never `record`; importing it is cheap and pulls in tensorflow only
when a training-side name is used. Imported by the recorder, the
integrations, the demos and users' scripts.
"""

from typing import Any

_LAZY = {
    "Pair": "tb_gradscope.pairs._pairs",
    "detect_pairs": "tb_gradscope.pairs._detect",
    "pair_ema": "tb_gradscope.pairs._pairs",
    "pair_models": "tb_gradscope.pairs._pairs",
    "pair_prefixes": "tb_gradscope.pairs._pairs",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "DriftMonitor":
        raise AttributeError(
            "tb_gradscope.pairs.DriftMonitor moved in 0.2: import it as "
            "`from tb_gradscope import DriftMonitor` (or tb_gradscope.record.DriftMonitor)"
        )
    raise AttributeError(f"module 'tb_gradscope.pairs' has no attribute '{name}'")
