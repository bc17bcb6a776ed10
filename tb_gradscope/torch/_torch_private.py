"""Every private PyTorch symbol the PyTorch recorder uses, each behind one named function.

Each says what it touches and why no public API does; one test per name
(`tests/unit/torch/test_torch_private.py`), and `tests/unit/test_private_api.py`
fails on private torch API in any other module. Imports nothing of the package.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.overrides

__all__ = ["foreach_norm", "function_mode_on_top"]


def function_mode_on_top(mode: Any) -> bool:
    """Whether `mode` is the innermost active TorchFunctionMode
    (`torch.overrides._get_current_function_mode_stack`). Leaving a mode pops
    the top of the stack whatever it is; the recorder leaves its capture mode
    only when it is its own, so a mode the user entered since stays on. No
    public API lists the active modes."""
    stack = torch.overrides._get_current_function_mode_stack()
    return bool(stack) and stack[-1] is mode


def foreach_norm(tensors: Sequence[torch.Tensor], ord: float) -> tuple[torch.Tensor, ...]:
    """The `ord`-norm of each tensor in one grouped kernel per device and dtype
    (`torch._foreach_norm`, what `clip_grad_norm_` uses): 0 counts non-zero
    elements, inf is the max |x|. `torch.linalg.vector_norm` takes one tensor
    a call; no public API reduces a list of tensors at once."""
    return tuple(torch._foreach_norm(list(tensors), ord))
