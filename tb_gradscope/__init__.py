"""tb_gradscope: see which subgraphs each loss updates.

Importing this package is cheap and never imports tensorflow: TensorBoard loads
`tb_gradscope.plugin` through it. The training-side API (`Recorder`,
`StartPoint`) is imported from `tb_gradscope.record` on first use.
"""

from typing import Any

from tb_gradscope.scopes import ScopeSpec

__version__ = "0.1.0"

_LAZY = {"Recorder": "tb_gradscope.record", "StartPoint": "tb_gradscope.record"}

__all__ = ["Recorder", "ScopeSpec", "StartPoint", "__version__"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tb_gradscope' has no attribute '{name}'")
