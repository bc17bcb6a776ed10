"""Two compiled train functions, chosen on the host batch by batch.

The instrumented train step (`step.py`) decides in the graph whether a batch
is recorded, so every batch pays for the decision and for the outer tape: ~0.2
ms per batch on a small model, 5 % of a `fit` batch. But `fit` looks
`model.train_function` up before every call and tells callbacks the batch
first (`on_train_batch_begin`), and the step a batch records is known on the
host: the optimizer's `iterations` advance by one per batch. So the callback
keeps two functions, Keras's own build of the instrumented step and one of the
model's plain step, and points `model.train_function` at the instrumented one
only for calls that hold a recorded batch. Unrecorded batches run exactly
what `fit` runs without the callback.

The instrumented function keeps its in-graph gate, so a call the host sends
there by mistake records only what is due. The host's count is checked against
the optimizer at every drain; if they ever disagree (an optimizer step that
did not count a batch) every later call goes to the instrumented function, as
before this module existed. Not used where the count cannot be trusted from
the start: a LossScaleOptimizer (a skipped batch leaves `iterations` where it
was), or tf_keras (its `make_train_function` traces `model.train_step` when
first called, not when the function is made).

Nor while the step draws from a random stream held in an op's kernel
(`kernel_rng.py`): two functions taking turns would each draw their own
stream. Until the instrumented step has been traced that is not known, so a
fit's calls go to the instrumented function until it has been.

The plain function is made with Keras's public `make_train_function(force=True)`
while `model.train_step` is, for that call only, the plain step (Keras 3 binds
the step when it makes the function).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tb_gradscope.record import _loss_scale as loss_scale


class TrainFunctions:
    """The recorded and the plain train function of one instrumented model.

    Args:
      model: the Keras 3 model whose `train_step` is the instrumented one.
      plain_step: the model's own step, as the plain function runs it.
      every: a batch is recorded when its step is divisible by this.
      one_function: whether every call must run the instrumented function for
        now (asked before each call: the step not traced yet, or drawing from
        kernel-held random streams).
    """

    def __init__(
        self,
        model: Any,
        plain_step: Callable[[Any], Any],
        every: int,
        one_function: Callable[[], bool] = lambda: False,
    ):
        self.model = model
        self.every = every
        self._plain_step = plain_step
        self._one_function = one_function
        self.recorded: Any = None
        self.plain: Any = None
        self.trusted = True  # the host's step count matches the optimizer's
        self._spe = 1

    @staticmethod
    def supported(model: Any) -> bool:
        """Whether the host can tell recorded batches from the others for `model`
        (a Keras 3 model: call only for those)."""
        return not loss_scale.is_loss_scale_optimizer(getattr(model, "optimizer", None))

    def install(self, steps_per_execution: int) -> None:
        """At the start of `fit` (after Keras made its train function): adopts a
        newly made instrumented function and builds the plain one beside it."""
        current = self.model.train_function
        if current is None:
            return
        if current is not self.recorded and current is not self.plain:
            self.recorded, self.plain = current, None  # compiled again (or a first fit)
        if self.plain is None:
            self.plain = self._make_plain(current)
        self._spe = max(1, int(steps_per_execution))

    def _make_plain(self, recorded: Any) -> Any:
        """Keras's own build of the plain step, beside the instrumented function."""
        model = self.model
        instrumented = model.__dict__["train_step"]
        model.train_step = self._plain_step
        try:
            model.make_train_function(force=True)
            return model.train_function
        finally:
            model.train_step = instrumented
            model.train_function = recorded

    def choose(self, step: int) -> None:
        """Points `model.train_function` at the function for the call starting at `step`."""
        if self.plain is None or self.recorded is None:
            return
        due = not self.trusted or self._one_function() or (-step) % self.every < self._spe
        self.model.train_function = self.recorded if due else self.plain

    def check(self, expected: int, actual: int) -> None:
        """Stops trusting the host's count once it differs from the optimizer's."""
        if expected != actual:
            self.trusted = False

    def release(self) -> None:
        """After `fit`: later calls (a fit without the callback, `train_on_batch`)
        run the plain function (recording is switched off there anyway)."""
        if self.plain is not None and self.model.train_function is self.recorded:
            self.model.train_function = self.plain
