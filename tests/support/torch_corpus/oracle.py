"""The PyTorch oracle: each (loss, scope) cell's flow state by brute force.

Independent of tb_gradscope (its recorder, analysis and rules): it runs
PyTorch on the shape's own step and asks three questions per (loss,
parameter), from the state before the step:

1. reach: `torch.autograd.grad(loss, params, allow_unused=True)` (a start
   point's tensor with its `grad_outputs`) gives a non-None, non-zero gradient;
2. dependence: add noise to the parameter (grouped, halved while the loss
   moves), recompute the loss from the same inputs and the same RNG state:
   does its value change?
3. application: a copy of each optimizer that consumes the loss's gradient
   (same param groups, a deep copy of its state, stepped through the
   unwrapped `step` so no hook of the product's sees it), given this loss's
   gradient alone: does the parameter move?

State: gradient -> `updates` if it moved, else `ignored`; no gradient ->
`blocked` if dependent, else `independent`; scopes and roll-ups as the TF
oracle (`tests.support.corpus.oracle.roll_up`: the most flowing child wins).
Parameters, buffers, `.grad`, the optimizers and the RNG are left bit for bit
as they were, and the oracle's own torch calls run `unobserved()`: a
recorder capturing the step's dataflow (a TorchFunctionMode) never sees them. Per-path cuts (`except_via`) silence the excepted scopes as the
TF oracle does: weight matrices to zero, biases to fixed noise.
"""

from __future__ import annotations

import collections
import contextlib
import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import torch

from tests.support.corpus.oracle import (
    StepTruth,
    VariableFacts,
    _dependent,
    leaf_scope,
    roll_up,
    under,
)
from tests.support.torch_corpus.spec import StepProbe

WRAPPERS = ("module", "_orig_mod")  # DDP / AveragedModel and torch.compile wrappers
_PERTURBATIONS = ((1, 0.5), (2, 3.0))  # (seed, noise scale relative to the parameter's size)


def named_parameters(models: Mapping[str, Any]) -> dict[str, torch.nn.Parameter]:
    """{`<key>/<module path>/<parameter>`: parameter}, the product's scope names
    written out again: `l1.weight` of model `online` is `online/l1/weight`
    (scope `online/l1`); wrapper levels (`module.`, `_orig_mod.`) are dropped."""
    out: dict[str, torch.nn.Parameter] = {}
    for key, model in models.items():
        for name, p in model.named_parameters():
            parts = [part for part in name.split(".") if part not in WRAPPERS]
            out.setdefault("/".join([key] + parts), p)
    return out


def unobserved() -> contextlib.AbstractContextManager:
    """Torch calls inside run past every active TorchFunctionMode (the
    recorder's capture of the step's dataflow is one): the oracle looks at the
    step without being part of it. `torch._C.DisableTorchFunction` is the one
    switch torch has for that; a test-only use of a private symbol."""
    return torch._C.DisableTorchFunction()


def torch_truth(probe: StepProbe) -> StepTruth:
    """The three questions on every loss of the probe; restores everything."""
    with unobserved():
        return _truth(probe)


def _truth(probe: StepProbe) -> StepTruth:
    named = named_parameters(probe.models)
    names, params = list(named), list(named.values())
    facts: dict[str, dict[str, VariableFacts]] = {}
    with _restored(probe) as rng:
        for loss in probe.losses:
            extra = [
                p
                for opt in loss.optimizers
                for g in opt.param_groups
                for p in g["params"]
                if not any(p is q for q in params)
            ]
            everything = params + extra
            torch.set_rng_state(rng)
            value, seed = _split(loss.forward())
            grads = _gradients(value, seed, everything)
            has_grad = [g is not None and bool((g != 0).any()) for g in grads[: len(params)]]

            def recompute(loss=loss) -> torch.Tensor:
                torch.set_rng_state(rng)
                with torch.no_grad():
                    return _split(loss.forward())[0].detach().clone()

            base = recompute()
            found = _dependent(
                [i for i, g in enumerate(has_grad) if not g],
                lambda idx: _changes([params[i] for i in idx], recompute, base),
            )
            moved = _moved(everything, grads, loss.optimizers)[: len(params)]
            facts[loss.name] = {
                n: VariableFacts(g, g or i in found, m)
                for i, (n, g, m) in enumerate(zip(names, has_grad, moved))
            }
    states = {loss: roll_up({n: f.state for n, f in per.items()}) for loss, per in facts.items()}
    return StepTruth(facts=facts, states=states)


def silenced_truth(probe: StepProbe, pattern: str) -> StepTruth:
    """`torch_truth` with every weight matrix (dim >= 2) of the scopes matching
    `pattern` (or below one) set to zero and their other parameters to fixed
    noise: their output is a non-zero constant of their input, so a gradient
    still reaching a scope came by a path avoiding them."""
    named = named_parameters(probe.models)
    silenced = [p for n, p in named.items() if under(leaf_scope(n), pattern)]
    if not any(p.dim() >= 2 for p in silenced):
        raise AssertionError(
            f"except_via={pattern}: no weight matrix to silence in {sorted(named)}"
        )
    with unobserved():
        return _silenced(silenced, probe)


def _silenced(silenced: Sequence[torch.Tensor], probe: StepProbe) -> StepTruth:
    saved = [p.detach().clone() for p in silenced]
    generator = torch.Generator().manual_seed(0)
    try:
        with torch.no_grad():
            for p in silenced:
                quiet = (
                    torch.zeros_like(p)
                    if p.dim() >= 2
                    else torch.randn(p.shape, generator=generator, dtype=p.dtype)
                )
                p.copy_(quiet)
        return _truth(probe)
    finally:
        with torch.no_grad():
            for p, value in zip(silenced, saved):
                p.copy_(value)


@contextlib.contextmanager
def _restored(probe: StepProbe) -> Iterator[torch.Tensor]:
    """Yields the RNG state; afterwards every model's state (parameters and
    buffers), every parameter's `.grad` and the RNG are what they were."""
    rng = torch.get_rng_state()
    tensors = [t for m in probe.models.values() for t in m.state_dict(keep_vars=True).values()]
    saved = [t.detach().clone() for t in tensors]
    grads = [(p, p.grad) for m in probe.models.values() for p in m.parameters()]
    try:
        yield rng
    finally:
        with torch.no_grad():
            for t, value in zip(tensors, saved):
                t.copy_(value)
        for p, g in grads:
            p.grad = g
        torch.set_rng_state(rng)


def _split(out: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
    return out if isinstance(out, tuple) else (out, None)


def _gradients(
    value: torch.Tensor, seed: torch.Tensor | None, params: Sequence[torch.Tensor]
) -> list[torch.Tensor | None]:
    """This loss's gradient for each parameter (None: no path, or frozen)."""
    wanted = [i for i, p in enumerate(params) if p.requires_grad]
    out: list[torch.Tensor | None] = [None] * len(params)
    if not value.requires_grad or not wanted:
        return out
    found = torch.autograd.grad(
        value,
        [params[i] for i in wanted],
        grad_outputs=seed,
        allow_unused=True,
        retain_graph=True,
    )
    for i, g in zip(wanted, found):
        out[i] = g
    return out


def _changes(params: Sequence[torch.Tensor], recompute: Any, base: torch.Tensor) -> bool:
    """Whether noise on `params` together changes the loss (two scales); restores them."""
    originals = [p.detach().clone() for p in params]
    try:
        for seed, scale in _PERTURBATIONS:
            generator = torch.Generator().manual_seed(seed)
            with torch.no_grad():
                for p, original in zip(params, originals):
                    size = float(original.abs().mean()) + 1.0 if original.numel() else 1.0
                    noise = torch.randn(original.shape, generator=generator, dtype=torch.float64)
                    p.copy_((original.double() + scale * size * noise).to(p.dtype))
            if not torch.equal(recompute(), base):
                return True
        return False
    finally:
        with torch.no_grad():
            for p, original in zip(params, originals):
                p.copy_(original)


def _moved(
    params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor | None], optimizers: Sequence[Any]
) -> list[bool]:
    """Whether each parameter moves when copies of `optimizers` step on this
    loss's gradient alone (`.grad` and the parameters restored after)."""
    if not optimizers:
        return [False] * len(params)
    before = [p.detach().clone() for p in params]
    saved_grads = [p.grad for p in params]
    try:
        for p, g in zip(params, grads):
            p.grad = None if g is None else g.detach().clone()
        for opt in optimizers:
            _unhooked_step(opt)
        return [not torch.equal(b, p.detach()) for b, p in zip(before, params)]
    finally:
        with torch.no_grad():
            for p, b in zip(params, before):
                p.copy_(b)
        for p, g in zip(params, saved_grads):
            p.grad = g


def _unhooked_step(opt: Any) -> None:
    """One step of a copy of `opt`: the same parameters and hyperparameters, a
    deep copy of its state, through the class's own `step` (torch wraps it to
    run step hooks; the copy runs none, so no recorder sees it)."""
    clone = copy.copy(opt)
    clone.param_groups = [dict(group) for group in opt.param_groups]
    clone.state = collections.defaultdict(dict)
    for p, state in opt.state.items():
        clone.state[p] = {
            k: v.detach().clone() if torch.is_tensor(v) else copy.deepcopy(v)
            for k, v in state.items()
        }
    step = type(opt).step
    getattr(step, "__wrapped__", step)(clone)
