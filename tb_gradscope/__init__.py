"""tb_gradscope: see which subgraphs each loss updates.

The root holds what both sides share (`scopes`: variable names -> the scope
tree) and the entry points: `cli` (`tb-gradscope`), `testing` (pytest helpers)
and, imported lazily, every public name of the training side: `Recorder`,
`StartPoint` and `DriftMonitor` (`tb_gradscope.record`), the pair makers
(`tb_gradscope.pairs`), `GradscopeCallback` (Keras `fit`) and `GraphRecorder` /
`pair_scopes` (TF1). Importing it is cheap and never imports tensorflow:
TensorBoard loads `tb_gradscope.plugin` through it. Imported by users and by
every package below it (docs/ARCHITECTURE.md draws the arrows).
"""

from typing import Any

from tb_gradscope.scopes import ScopeSpec as ScopeSpec

__version__ = "0.1.0"

_LAZY = {
    "Recorder": "tb_gradscope.record",
    "StartPoint": "tb_gradscope.record",
    "DriftMonitor": "tb_gradscope.record",
    "pair_models": "tb_gradscope.pairs",
    "pair_prefixes": "tb_gradscope.pairs",
    "pair_ema": "tb_gradscope.pairs",
    "detect_pairs": "tb_gradscope.pairs",
    "GradscopeCallback": "tb_gradscope.integrations.keras",
    "LegacyGradscopeCallback": "tb_gradscope.integrations.keras",
    "GraphRecorder": "tb_gradscope.integrations.tf1",
    "pair_scopes": "tb_gradscope.integrations.tf1",
}

__all__ = sorted([*_LAZY, "ScopeSpec", "__version__"])


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        try:
            module = importlib.import_module(_LAZY[name])
        except ModuleNotFoundError as e:
            if (e.name or "").split(".")[0] not in ("tensorflow", "keras"):
                raise
            raise ImportError(
                f"tb_gradscope.{name} records TensorFlow training and needs TensorFlow: "
                "install tensorflow (pip install 'tb-gradscope[tensorflow]'); for PyTorch "
                "use tb_gradscope.torch"
            ) from e
        return getattr(module, name)
    raise AttributeError(f"module 'tb_gradscope' has no attribute '{name}'")
