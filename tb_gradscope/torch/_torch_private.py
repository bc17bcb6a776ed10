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

__all__ = [
    "ddp_sink_reduces",
    "foreach_abs",
    "foreach_copy",
    "foreach_max",
    "foreach_norm",
    "foreach_sign_",
    "foreach_sub",
    "leave_function_mode",
    "load_compiler",
    "version",
]


def leave_function_mode(mode: Any) -> bool:
    """Takes `mode` off the TorchFunctionMode stack wherever it is, the modes
    entered after it kept in order (`torch.overrides._get_current_function_mode_stack`,
    `_pop_mode`, `_push_mode`). `mode.__exit__` pops the top of the stack
    whatever it is: with another recorder's capture or a user's mode entered
    since, it would remove theirs and leave ours on, observing every later op.
    No public API removes a mode that is not on top. True if it was there."""
    if not any(m is mode for m in torch.overrides._get_current_function_mode_stack()):
        return False
    above = []
    while True:
        top = torch.overrides._pop_mode()
        if top is mode:
            break
        above.append(top)
    for other in reversed(above):
        torch.overrides._push_mode(other)
    return True


def foreach_norm(
    tensors: Sequence[torch.Tensor], ord: float, dtype: torch.dtype | None = None
) -> tuple[torch.Tensor, ...]:
    """The `ord`-norm of each tensor in one grouped kernel per device and dtype
    (`torch._foreach_norm`, what `clip_grad_norm_` uses): 0 counts non-zero
    elements, inf is the max |x|. `torch.linalg.vector_norm` takes one tensor
    a call; no public API reduces a list of tensors at once. `dtype`: the
    accumulation's and the result's (float32 for half types). An empty list
    gives an empty tuple (`_foreach_norm` raises on one)."""
    tensors = list(tensors)
    return tuple(torch._foreach_norm(tensors, ord, dtype=dtype)) if tensors else ()


def foreach_max(tensors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The largest element of each tensor (0 for an empty one) in one grouped
    kernel per device and dtype (`torch._foreach_max`). On a CPU it costs a
    tenth of `_foreach_norm(tensors, inf)`, which loops over the tensors with
    a slow reduction; `torch.amax` takes one tensor a call."""
    tensors = list(tensors)
    full = [t for t in tensors if t.numel()]  # _foreach_max raises on an empty tensor
    maxima = iter(torch._foreach_max(full) if full else ())
    return tuple(next(maxima) if t.numel() else t.new_zeros(()) for t in tensors)


def foreach_sub(
    minuends: Sequence[torch.Tensor], subtrahends: Sequence[torch.Tensor]
) -> list[torch.Tensor]:
    """a - b for each pair, as new tensors, in one grouped kernel per device
    and dtype (`torch._foreach_sub`, what the foreach optimizers use). A
    recorded step takes a difference per parameter for its updates and per
    pair tensor for drift; `torch.sub` takes one pair a call."""
    minuends, subtrahends = list(minuends), list(subtrahends)
    return list(torch._foreach_sub(minuends, subtrahends)) if minuends else []


def foreach_abs(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """|x| of each tensor, as new tensors, in one grouped kernel per device and
    dtype (`torch._foreach_abs`): a recorded step's gradient magnitudes, whose
    grouped max and count of non-zeros follow. `torch.abs` takes one a call."""
    tensors = list(tensors)
    return list(torch._foreach_abs(tensors)) if tensors else []


def foreach_sign_(tensors: Sequence[torch.Tensor]) -> None:
    """sign(x) of each tensor, in place, in one grouped kernel per device and
    dtype (`torch._foreach_sign_`): magnitudes become the 0/1 rows a 2-norm
    counts. `Tensor.sign_` takes one tensor a call."""
    tensors = list(tensors)
    if tensors:
        torch._foreach_sign_(tensors)


def foreach_copy(destinations: Sequence[torch.Tensor], sources: Sequence[torch.Tensor]) -> None:
    """Copies each source into its destination in one grouped kernel per
    device and dtype (`torch._foreach_copy_`): the parameters' snapshot at a
    recorded step's start. `Tensor.copy_` takes one tensor a call."""
    if destinations:
        torch._foreach_copy_(list(destinations), list(sources))


def version(tensor: torch.Tensor) -> int:
    """The tensor's version counter (`Tensor._version`): autograd bumps it at
    every in-place change, so an unchanged `.grad` (same tensor, same version)
    still holds the gradients accumulated into it. `zero_grad(set_to_none=False)`
    and a backward that accumulates both change it in place; no public API tells
    a tensor was written since."""
    return tensor._version


def ddp_sink_reduces(node: Any) -> bool:
    """Whether a backward through autograd node `node` would run
    DistributedDataParallel's delayed all-reduce: `node` is the backward of the
    `_DDPSink` Function DDP puts on its outputs, and its DDP has a static graph
    (the sink is there on its first iteration only, and its backward queues
    `reducer._delay_all_reduce` into whichever backward runs it first). No
    public API names DDP's sink or says that its backward starts a collective."""
    if type(node).__name__ != "_DDPSinkBackward":
        return False
    ddp = node.ddp_weakref()
    return ddp is not None and bool(ddp.static_graph)


def load_compiler() -> None:
    """Imports `torch._dynamo` (and with it triton) now.

    A process that has imported tensorflow segfaults the first time torch loads
    triton, which a torch optimizer's constructor does through `torch._dynamo`
    (TF 2.21, torch 2.14); loaded before tensorflow, both run. No public API
    loads the compiler stack short of compiling something.
    """
    import torch._dynamo  # noqa: F401
