"""The PyTorch Shape protocol: what a torch corpus shape gives the oracle and the harness.

A shape is one PyTorch training-loop form (DQN, DDPG, BYOL, ...) written in
its natural style with `tb_gradscope.torch.Recorder` attached. Its
`train(logdir, observer)` trains it and, around every training step, lets
the oracle look:

    for step in range(shape.steps):
        observer.before(step, probe)   # state before the step: the oracle runs here
        ...the step: forward, rec.backward, opt.step(), target update...
        observer.after(step)           # after the target update: drift is read here

`step` is the recorder's step number of that training step (`rec.step_count`
before it runs; every shape runs one recorded step per loop iteration). The
observer examines the recorded steps only and restores everything it touches
(parameters, buffers, `.grad`, the RNG), so the run is the same with or
without it. A probe is cheap to build (closures): the shape builds one every
step.

Each loss is described by a `forward` closure that recomputes it from the
step's inputs with the current parameters, with the step's own cuts
(`.detach()`, `torch.no_grad()`, ...), and by the optimizers whose `step()`
consumes its gradient in the step (with one summed backward before several
`opt.step()` calls, every one of them consumes every loss's gradient).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from tests.support.corpus.spec import PairProbe

__all__ = [
    "DATA",
    "DETACH",
    "FROZEN",
    "ITEM",
    "NO_GRAD",
    "TORCH",
    "LossProbe",
    "Observer",
    "PairProbe",
    "Shape",
    "StepProbe",
]

TORCH = "torch"  # the one style of this corpus, as `Shape.style`

# What cut a blocked path, as (the blocked edge's `cause`, a word of its `op_name`):
# the format's causes (docs/FORMAT.md), the PyTorch call that cut.
DETACH = ("stop_gradient", "detach")
NO_GRAD = ("stop_gradient", "no_grad")
DATA = ("stop_gradient", ".data")
FROZEN = ("tape_boundary", "requires_grad=False")
ITEM = ("non_differentiable", "item")


@dataclasses.dataclass(frozen=True)
class LossProbe:
    """How the oracle examines one named loss at one step.

    Attributes:
      name: the loss name the product records.
      forward: recomputes the loss from the step's inputs with the current
        parameters; returns the scalar loss, or `(tensor, grad_outputs)` for a
        gradient start point. Its randomness comes from torch's global RNG,
        which the oracle resets to the step's state before every call.
      optimizers: the optimizers whose `step()` consumes this loss's gradient.
    """

    name: str
    forward: Callable[[], Any]
    optimizers: Sequence[Any] = ()


@dataclasses.dataclass(frozen=True)
class StepProbe:
    """A training step as the oracle sees it.

    Attributes:
      losses: every loss the product records at this step.
      models: the recorder's `models` (root name -> nn.Module); the oracle
        names their parameters as the product's scopes do and snapshots their
        whole state (buffers too: a BatchNorm forward moves its statistics).
      pairs: target/online pairs with drift.
    """

    losses: Sequence[LossProbe]
    models: Mapping[str, Any]
    pairs: Sequence[PairProbe] = ()


class Observer(Protocol):
    """What a shape's training loop calls; the harness implements it."""

    def before(self, step: int, probe: StepProbe) -> None:
        """Before the training step `step` runs (state = what its gradients see)."""

    def after(self, drift_step: int) -> None:
        """After the step and its target update, with the step the product
        labels that drift with."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """One PyTorch training-loop shape of the corpus.

    The fields the read-side comparisons use are those of the TF corpus's
    `Shape` (tests/support/corpus/spec.py), so its harness judges both.

    Attributes:
      name: unique id, used as the test id and the run directory name.
      train: `train(logdir, observer)`, see the module docstring.
      rules: rule texts the correct shape obeys (a mutant keeps its correct
        shape's rules: its leak must break one). The oracle decides which hold.
      mutant_of: for a leaky mutant, the name of the correct shape it breaks.
      causes: what cut the run's blocked edges, as (cause, op word) pairs
        (DETACH, NO_GRAD, ...): each edge matches one of them, each of them
        matches some edge.
      steps: training steps run.
      every_n_steps: the product's recording period.
      advice: for a mutant, words `tb-gradscope check`'s violation must
        contain to name the right fix; empty when either fix is right.
      xfail: a reason when a test breaks on a product bug (reported, not hidden).
      xfail_tests: the corpus tests (function names) that reason breaks; each
        of them is a strict xfail, every other test must pass.
      note: one line for docs/CORRECTNESS.md (what the shape is).
    """

    name: str
    train: Callable[[str, Observer], None]
    rules: tuple[str, ...] = ()
    mutant_of: str | None = None
    causes: tuple[tuple[str, str], ...] = ()
    steps: int = 4
    every_n_steps: int = 1
    advice: tuple[str, ...] = ()
    xfail: str | None = None
    xfail_tests: tuple[str, ...] = ()
    note: str = ""
    style: str = TORCH
    has_flowgraph: bool = True

    def __post_init__(self):
        if self.steps < 1 or self.every_n_steps < 1:
            raise ValueError(f"shape '{self.name}': steps and every_n_steps must be >= 1")
        if bool(self.xfail) != bool(self.xfail_tests):
            raise ValueError(f"shape '{self.name}': xfail and xfail_tests go together")

    @property
    def recorded_steps(self) -> tuple[int, ...]:
        """The steps the product records (and the oracle examines)."""
        return tuple(s for s in range(self.steps) if s % self.every_n_steps == 0)
