"""The Lightning callback's work, shared by `lightning.pytorch` and `pytorch_lightning`.

`LightningHooks` holds the Callback hooks; the public modules
(`tb_gradscope.torch.lightning`, `tb_gradscope.torch.pytorch_lightning`) mix
it into their package's `Callback` class. It reads the trainer and the
module through their public attributes only, so it imports neither package.

- Models: the LightningModule's direct children, each a scope root named by
  its attribute (`generator`, `head_a`); optimizers: `trainer.optimizers`.
  The Recorder is built at `on_train_start` (after the sanity check, before
  the first batch's forward, which step 0 analyses).
- One training batch is one step: a `rec.step()` block open from
  `on_train_batch_start` to `on_train_batch_end`, closed on every other exit.
- Each backward Lightning runs is observed between `on_before_backward` and
  `on_after_backward`. Its losses: manual optimization, the call site's name
  (`self.manual_backward(g_loss)` -> "g_loss"); automatic, "loss", or the
  named parts of the dict `training_step` returned (`named_parts`), read by a
  wrapper on the module's `training_step` from `setup` to `teardown`.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from tb_gradscope.core.warn import warn_once
from tb_gradscope.rules import FlowRuleViolation
from tb_gradscope.scopes import ScopeSpec
from tb_gradscope.torch import _call_site
from tb_gradscope.torch import _reach as reach_lib
from tb_gradscope.torch._recorder import Recorder

_SERIALS = itertools.count()  # warn_once keys: id() of a dead callback may be reused
TOTAL = "loss"  # the name of the total a training_step returns, as Lightning's dict key


class LightningHooks:
    """Records a Lightning training run into the gradscope records (see the public class)."""

    # The TensorBoardLogger class of the Lightning package the public class is for.
    tensorboard_logger: type | None = None

    def __init__(
        self,
        logdir: str | os.PathLike | None = None,
        every_n_steps: int = 10,
        rules: Any = (),
        pairs: Sequence[Any] | str = (),
        losses: Mapping[str, str] | None = None,
        on_violation: str | None = None,
        conflict: bool = True,
        scopes: ScopeSpec | None = None,
    ):
        super().__init__()
        if (
            isinstance(every_n_steps, bool)
            or not isinstance(every_n_steps, int)
            or every_n_steps < 1
        ):
            raise ValueError(f"every_n_steps must be an int >= 1, got {every_n_steps!r}")
        renames = dict(losses or {})
        for old, new in renames.items():
            if not isinstance(new, str) or not new or "/" in new or "|" in new:
                raise ValueError(
                    f"losses: the new name {new!r} of {old!r} must be a non-empty "
                    "string without '/' or '|'"
                )
        self.logdir = None if logdir is None else os.fspath(logdir)
        self.every_n_steps = every_n_steps
        self.recorder: Recorder | None = None
        self._options = {
            "rules": rules,
            "pairs": pairs,
            "on_violation": on_violation,
            "conflict": conflict,
            "scopes": scopes,
        }
        self._renames = renames
        self._serial = next(_SERIALS)
        self._run_logdir: str | None = None
        self._block = contextlib.ExitStack()
        self._in_backward = False
        self._wrapped: tuple[Any, Any] | None = None  # (module, its own training_step attribute)
        self._output: Mapping[str, Any] | None = None

    # ----- the run's boundaries ---------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Resolves the logdir (a clear error before training when there is
        none) and, for automatic optimization, wraps `training_step` to see its dict."""
        if stage != "fit":
            return
        self._run_logdir = self._resolve_logdir(trainer)
        if pl_module.automatic_optimization:
            self._wrap_training_step(pl_module)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Builds the Recorder over the module's children and the trainer's optimizers."""
        if not trainer.is_global_zero or self.recorder is not None:
            return
        models = {name: child for name, child in pl_module.named_children()}
        self.recorder = Recorder(
            self._run_logdir or self._resolve_logdir(trainer),
            every_n_steps=self.every_n_steps,
            models=models,
            optimizers=list(trainer.optimizers),
            **self._options,
        )

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self._finish()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        """Training raised: the pending backward's hooks go, the step and the run are closed."""
        rec = self.recorder
        if rec is not None and self._in_backward:
            self._in_backward = False
            rec.backward_failed()
        self._finish(quiet=True)
        self._unwrap_training_step()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._finish()
        self._unwrap_training_step()

    # ----- one batch: one step ------------------------------------------------

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        rec = self.recorder
        if rec is None:
            return
        self._block.close()  # a batch whose end never came (on_train_batch_start returned -1)
        if not rec.disabled:
            self._block.enter_context(rec.step())

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._output = None
        self._block.close()  # ends the step; FlowRuleViolation comes out here under "raise"

    # ----- each backward Lightning runs --------------------------------------

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: torch.Tensor) -> None:
        rec = self.recorder
        output, self._output = self._output, None
        if rec is None or rec.disabled:
            return
        try:
            if rec.in_step and not rec.observing:  # a batch with nothing due: no name read
                parts = {TOTAL: loss}
            elif pl_module.automatic_optimization:
                parts = named_parts(loss, output)
            else:
                parts = {_call_site.loss_name(_call_site.user_frame()): loss}
            parts = {self._renames.get(name, name): t for name, t in parts.items()}
        except Exception as e:  # noqa: BLE001 - the callback must never kill training
            self._step_aside(e)
            return
        # The backward's own gradients are a loss's only when it is the whole loss.
        whole = len(parts) == 1 and next(iter(parts.values())) is loss
        rec.observe_backward(parts, hooks_allowed=whole)
        self._in_backward = True

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self._in_backward:
            self._in_backward = False
            self.recorder.backward_observed()

    # ----- internals --------------------------------------------------------

    def _resolve_logdir(self, trainer: Any) -> str:
        if self.logdir is not None:
            return self.logdir
        for logger in getattr(trainer, "loggers", ()):
            if self.tensorboard_logger is not None and isinstance(logger, self.tensorboard_logger):
                return logger.log_dir
        raise ValueError(
            "GradscopeCallback: no logdir given and the Trainer has no TensorBoardLogger; "
            "pass GradscopeCallback(logdir='logs/run') or "
            "Trainer(logger=TensorBoardLogger('logs'))"
        )

    def _wrap_training_step(self, pl_module: Any) -> None:
        """An instance attribute over the module's `training_step` that keeps the
        dict it returns for the backward that follows; removed at teardown."""
        if self._wrapped is not None:
            return
        own = pl_module.__dict__.get("training_step")
        step = pl_module.training_step

        @functools.wraps(step)
        def training_step(*args: Any, **kwargs: Any) -> Any:
            out = step(*args, **kwargs)
            self._output = out if isinstance(out, Mapping) else None
            return out

        pl_module.training_step = training_step
        self._wrapped = (pl_module, own)

    def _unwrap_training_step(self) -> None:
        if self._wrapped is None:
            return
        pl_module, own = self._wrapped
        self._wrapped = None
        self._output = None
        if own is None:
            pl_module.__dict__.pop("training_step", None)
        else:
            pl_module.training_step = own

    def _finish(self, quiet: bool = False) -> None:
        """Closes the step in progress and the Recorder (its event file flushed)."""
        rec, self.recorder = self.recorder, None
        self._in_backward = False
        try:
            self._block.close()
        except FlowRuleViolation:
            if not quiet:
                raise
        finally:
            if rec is not None:
                try:
                    rec.close()
                except FlowRuleViolation:
                    if not quiet:
                        raise

    def _step_aside(self, error: Exception) -> None:
        warn_once(
            ("lightning_callback_failed", self._serial),
            f"tb_gradscope: GradscopeCallback stopped recording after an error "
            f"({type(error).__name__}: {error}); training continues unaffected",
        )
        try:
            self._finish(quiet=True)
        except Exception:  # noqa: BLE001 - stepping aside must never break the loop
            pass


def named_parts(total: torch.Tensor, output: Mapping[str, Any] | None) -> dict[str, torch.Tensor]:
    """The losses of an automatic-optimization backward of `total`.

    With a dict from `training_step`, its other scalar tensors that `total`'s
    autograd graph reaches are its named parts, one row each; if the graph
    also reaches a parameter through none of them (a term the dict does not
    name), the total is recorded too, as "loss". Without parts: {"loss": total}.
    """
    candidates: dict[Any, list[str]] = {}
    for key, value in (output or {}).items():
        if (
            key != TOTAL
            and isinstance(key, str)
            and key
            and isinstance(value, torch.Tensor)
            and value.grad_fn is not None
            and value.numel() == 1
            and value.is_floating_point()
        ):
            candidates.setdefault(value.grad_fn, []).append(key)
    if not candidates or total.grad_fn is None:
        return {TOTAL: total}
    by_name = {k: v for k, v in output.items() if isinstance(k, str)}
    found: list[str] = []
    beyond = False

    def expand(node: Any) -> bool:
        nonlocal beyond
        names = candidates.get(node)
        if names is not None:
            found.extend(names)
            return False
        if getattr(node, "variable", None) is not None:  # a parameter's AccumulateGrad
            beyond = True
            return False
        return True

    reach_lib.walk([total.grad_fn], expand)
    if not found:
        return {TOTAL: total}
    parts = {_safe(name): by_name[name] for name in sorted(found, key=list(by_name).index)}
    if beyond:
        parts[TOTAL] = total
    return parts


def _safe(name: str) -> str:
    return name.replace("/", "_").replace("|", "_")
