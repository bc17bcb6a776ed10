"""The Recorder under `torch.distributed` (DistributedDataParallel): who writes, which gradients.

- Only rank 0 records and writes: `rank()` is `torch.distributed.get_rank()`
  when a process group is initialized when the Recorder is built, else 0;
  another rank's Recorder runs the user's backward and nothing else (no event
  file, no hooks).
- The recorder enters no collective, ever: a rank whose recorder fails (or
  does not record) must never leave the others waiting. So the gradients it
  records are those DDP already reduced: DDP averages `.grad` over the ranks
  inside the backward (its reducer's hooks, finished before `backward()`
  returns), so a single loss's gradient is read from `.grad` after the
  backward (`grads_before` / `grads_after`), not from parameter hooks, which
  see the rank's own gradient before the all-reduce. Several losses in one
  backward are each differentiated by the recorder's own `autograd.grad`,
  which DDP does not reduce: their rows are rank 0's own gradients, of its
  share of the batch (docs/TORCH.md, *DistributedDataParallel*).
- An extra backward through DDP's first static-graph iteration would start
  DDP's delayed all-reduce on this rank alone (`reduces_in_backward`): the
  recorder takes none there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from tb_gradscope.torch import _reach as reach_lib
from tb_gradscope.torch import _torch_private as private

# The autograd node of DDP's `_DDPSink`, as `_reach.reached` names custom Functions.
SINK = "_DDPSinkBackward"


def initialized() -> bool:
    """Whether this process is in a `torch.distributed` process group."""
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    """This process's rank in the default process group; 0 outside one."""
    return dist.get_rank() if initialized() else 0


class Unwritten:
    """The event file of a rank that does not write: accepts nothing, creates nothing."""

    def close(self) -> None:
        """Nothing to close."""


def without_sink(custom: Mapping[str, list[str]]) -> dict[str, list[str]]:
    """Each loss's custom Functions but DDP's sink, which passes every gradient through."""
    return {name: [c for c in names if c != SINK] for name, names in custom.items()}


def reduces_in_backward(roots: Iterable[torch.Tensor], custom: Mapping[str, list[str]]) -> bool:
    """Whether a backward from any of `roots` would run a DDP collective
    (the delayed all-reduce of a static graph's first iteration): the
    recorder must then take no backward of its own."""
    if not any(SINK in names for names in custom.values()):
        return False
    found = False

    def expand(node: Any) -> bool:
        nonlocal found
        found = found or private.ddp_sink_reduces(node)
        return not found

    reach_lib.walk([r.grad_fn for r in roots if r.grad_fn is not None], expand)
    return found


def grads_before(
    params: Sequence[torch.Tensor], indices: Iterable[int]
) -> dict[int, torch.Tensor | None]:
    """What the reached parameters' `.grad` holds before the backward (a copy; None: empty)."""
    out: dict[int, torch.Tensor | None] = {}
    for i in indices:
        grad = params[i].grad
        out[i] = None if grad is None else grad.detach().clone()
    return out


def grads_after(
    params: Sequence[torch.Tensor], before: Mapping[int, torch.Tensor | None]
) -> dict[int, torch.Tensor]:
    """Each reached parameter's gradient from the backward that ran: `.grad`
    now (reduced over the ranks by DDP) minus what it held before."""
    out: dict[int, torch.Tensor] = {}
    for i, held in before.items():
        grad = params[i].grad
        if grad is None:
            continue  # the backward gave it none (a custom Function's None)
        out[i] = grad.detach() if held is None else grad.detach() - held
    return out
