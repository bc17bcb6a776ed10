"""The Shape protocol: what a corpus shape gives the oracle and the harness.

A shape is one training-loop form (DDPG, BYOL, TF1 DQN, ...) written in its
natural style. `Shape.train(logdir, observer)` trains it with the product
recording into `logdir` and, around every training step, lets the oracle look:

    for step in range(shape.steps):
        observer.before(step, probe)   # state before the step: the oracle runs here
        train_step(batch)              # the shape's own code, recorded by the product
        observer.after(drift_step)     # after the target update: drift is read here

`step` is the product's step number of that training step (`rec.step` before
it runs). `drift_step` is the step the product records that step's drift at:
a TF2 or Keras step's own `step` (its drift is labelled as its gradients are,
inside `rec.training_step()` or after a bare `rec.apply`, which advances); a
TF1 recorder reads drift at the start of step s (see `kit.tf1_loop`). The observer decides which steps it examines (the recorded ones) and
restores every variable it touches, so the training run is the same with or
without it. A probe must be cheap to build (closures, no TF work): the shape
builds one every step.

TF2 probes (`StepProbe`) describe each loss by a `forward` closure that redoes
the loss's forward pass with the step's inputs and the step's own tape
structure, and an `update` closure that runs only the optimizer step(s) that
consume that loss's gradient. TF1 probes (`TF1Probe`) give the loss tensors,
the feed and each loss's train op; a TF1 shape calls `observer.prepare(probe)`
once after building its graph and before finalizing it (the oracle adds its
gradient ops then).

Names: `variables` maps the product's full variable names to variables, so the
oracle's scopes are the product's strings: `<models key>/<Keras path without
the model's own name>` for TF2 (`oracle.named_variables` computes them), the
variable name without `:0` for TF1.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

# Kinds of training loop, as `Shape.style`.
TF_FUNCTION = "tf.function"
EAGER = "eager"
KERAS_FIT = "keras fit"
TF1_SESSION = "tf1 session"
STYLES = (TF_FUNCTION, EAGER, KERAS_FIT, TF1_SESSION)


@dataclasses.dataclass(frozen=True)
class Forward:
    """One loss's forward pass, as the step computes it.

    Attributes:
      tape: the tape the step takes this loss's gradient from, holding exactly
        what the step computes inside it (work done before the step's tape
        opens stays outside this tape too).
      value: the scalar loss, or a start point's tensor.
      output_gradients: a start point's seed (the tensor's shape); None for a
        scalar loss.
    """

    tape: Any
    value: Any
    output_gradients: Any = None


@dataclasses.dataclass(frozen=True)
class LossProbe:
    """How the oracle examines one named loss at one step (TF2, run eagerly).

    Attributes:
      name: the loss name the product records.
      forward: recomputes the loss from the step's inputs with the current
        variable values; deterministic (noise sampled once per step, outside).
      update: runs only the optimizer step(s) that consume this loss's
        gradient (with this step's inputs), nothing else: no target update,
        no other loss's optimizer.
    """

    name: str
    forward: Callable[[], Forward]
    update: Callable[[], None]


@dataclasses.dataclass(frozen=True)
class PairProbe:
    """A target/online pair whose drift the product records.

    Attributes:
      name: the product's pair name (the DRIFT record's name, `target<-online`).
      target: target variables by the product's full name (the DRIFT rows are
        their scopes).
      online: the online variable each target variable follows, same order.
    """

    name: str
    target: Mapping[str, Any]
    online: Sequence[Any]


@dataclasses.dataclass(frozen=True)
class StepProbe:
    """A TF2 training step as the oracle sees it.

    Attributes:
      losses: every loss the product records at this step.
      variables: the recorded variables by the product's full name.
      optimizers: every optimizer an `update` may run (their state is
        snapshotted and restored with the variables).
      pairs: target/online pairs with drift.
    """

    losses: Sequence[LossProbe]
    variables: Mapping[str, Any]
    optimizers: Sequence[Any] = ()
    pairs: Sequence[PairProbe] = ()


@dataclasses.dataclass(frozen=True)
class TF1Probe:
    """A TF1 training step as the oracle sees it.

    Attributes:
      session: the session the shape trains in (its graph is the shape's).
      feed_dict: the step's feed (the same for every oracle run).
      losses: loss name -> scalar loss tensor, or (tensor, grad_ys) for a
        start point.
      train_ops: loss name -> the op (or list of ops) that applies that loss's
        gradient; running it is "this loss's own update".
      variables: the recorded variables by the product's full name.
      pairs: target/online pairs with drift.
    """

    session: Any
    feed_dict: Mapping[Any, Any]
    losses: Mapping[str, Any]
    train_ops: Mapping[str, Any]
    variables: Mapping[str, Any]
    pairs: Sequence[PairProbe] = ()


class Observer(Protocol):
    """What a shape's training loop calls; the harness implements it."""

    def prepare(self, probe: TF1Probe) -> None:
        """TF1 only: once, after the graph is built and before it is finalized."""

    def before(self, step: int, probe: StepProbe | TF1Probe) -> None:
        """Before the training step `step` runs (state = what its gradients see)."""

    def after(self, drift_step: int) -> None:
        """After the step and its target update, with the step number the
        product records that drift at (see the module docstring)."""


@dataclasses.dataclass(frozen=True)
class Shape:
    """One training-loop shape of the corpus.

    Attributes:
      name: unique id, used as the test id and the run directory name.
      style: one of STYLES.
      train: `train(logdir, observer)`: trains `steps` steps with the product
        recording every `every_n_steps` steps into `logdir` (given the `rules`
        too), calling the observer around every step as the module docstring
        shows.
      rules: rule texts the correct shape obeys (a mutant keeps its correct
        shape's rules: its leak must break one). The oracle decides which hold.
      mutant_of: for a leaky mutant, the name of the correct shape it breaks.
      steps: training steps run.
      every_n_steps: the product's recording period.
      has_flowgraph: False when the shape by design writes no FlowGraph (an
        eager loop never traced); its `no_gradient` cells are then expected
        and reported as such.
      advice: for a mutant, words the violation's advice in `tb-gradscope
        check` must contain to name the right fix (`var_list` when the leak
        is an optimizer's variable list, `stop_gradient` when a cut is
        missing); empty when either fix is right.
      xfail: a reason when the shape needs product API that has not landed.
      xfail_tests: the corpus tests (function names) that reason breaks; each
        of them is a strict xfail, every other test must pass.
      drift_from_start: the product measures the first drift record's step
        columns (tau) from the pairs as initialised, read before the first
        step (`rec.function`, `rec.watch`, the Keras callback); else they are
        NaN there (a plain tf.function, the TF1 recorder).
      note: one line for docs/CORRECTNESS.md (what the shape is).
    """

    name: str
    style: str
    train: Callable[[str, Observer], None]
    rules: tuple[str, ...] = ()
    mutant_of: str | None = None
    steps: int = 4
    every_n_steps: int = 1
    has_flowgraph: bool = True
    advice: tuple[str, ...] = ()
    xfail: str | None = None
    xfail_tests: tuple[str, ...] = ()
    note: str = ""
    drift_from_start: bool = False

    def __post_init__(self):
        if self.style not in STYLES:
            raise ValueError(f"shape '{self.name}': style {self.style!r} is not one of {STYLES}")
        if self.steps < 1 or self.every_n_steps < 1:
            raise ValueError(f"shape '{self.name}': steps and every_n_steps must be >= 1")
        if bool(self.xfail) != bool(self.xfail_tests):
            raise ValueError(f"shape '{self.name}': xfail and xfail_tests go together")

    @property
    def recorded_steps(self) -> tuple[int, ...]:
        """The steps the product records (and the oracle examines)."""
        return tuple(s for s in range(self.steps) if s % self.every_n_steps == 0)


def watched_twin(shape: Shape, train: Callable[..., Any], **changes: Any) -> Shape:
    """`shape` with its step written as its users write it, under `@rec.watch`
    (tests/e2e/corpus/test_watched_corpus.py): the same data, oracle and rules,
    named `<name>_watched`, its mutant's twin the mutant's; a watched call reads
    the pairs at its start (`drift_from_start`)."""
    return dataclasses.replace(
        shape,
        name=f"{shape.name}_watched",
        train=train,
        mutant_of=shape.mutant_of and f"{shape.mutant_of}_watched",
        drift_from_start=True,
        **changes,
    )
