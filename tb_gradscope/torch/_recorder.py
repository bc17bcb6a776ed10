"""`Recorder`: records a plain PyTorch training loop into the gradscope records.

The public API and its argument checks; the work is `_recording.TorchRecording`'s.
Every call into the work goes through `_safely`: a failure inside the
recorder warns once (`GradscopeWarning`) and the recorder steps aside, while
the user's own backward always runs and training goes on.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch

from tb_gradscope.core.pairs import Pair
from tb_gradscope.core.rules import HostRuleSteps
from tb_gradscope.core.tables import TableInfos
from tb_gradscope.core.warn import warn_once
from tb_gradscope.core.writer import RecordWriter
from tb_gradscope.rules import FlowRuleViolation
from tb_gradscope.scopes import ScopeSpec
from tb_gradscope.torch import _distributed as distributed
from tb_gradscope.torch import _pairs as pairs_lib
from tb_gradscope.torch._drift import PairDrift
from tb_gradscope.torch._loss_scale import LossScale
from tb_gradscope.torch._losses import check_losses, user_backward
from tb_gradscope.torch._names import name_parameters
from tb_gradscope.torch._recording import TorchRecording
from tb_gradscope.torch._watch import BackwardWatch, RecorderPort

RECORDER_NAME = "torch"
_SERIALS = itertools.count()  # warn_once keys: id() of a dead recorder may be reused


class Recorder:
    """Records which scopes each loss updates in a PyTorch training loop.

    Example:

        rec = Recorder("logs/dqn", models={"online": q, "target": q_target},
                       optimizers=[opt], pairs=[pair_models(q_target, q, every=500)],
                       rules=["never(td, target/*)"])
        for step in range(steps):
            loss = ...
            opt.zero_grad()
            rec.backward({"td": loss})   # in place of loss.backward()
            opt.step()
        rec.close()

    Args:
      logdir: the run directory (created if needed); the records go to one
        event file there, readable by TensorBoard's Gradscope tab and
        `tb-gradscope report / check / doctor`.
      every_n_steps: record steps s with s % every_n_steps == 0.
      models: {root name: nn.Module}; parameter `l1.weight` of model `online`
        is in scope `online/l1` (`module.` and `_orig_mod.` wrappers dropped).
      optimizers: the optimizers that train the models; their step hooks show
        which loss feeds which optimizer, and their `param_groups` which
        parameters are applied (a reached parameter in no group is `ignored`).
      pairs: `pair_models(target, online, tau=|every=)` results, or "auto".
      rules: rule strings ("never(td, target/*)"), Rule objects, a TOML rules
        file or a RuleSet; checked at each analysis and at recorded steps.
      on_violation: "log", "warn" or "raise" (FlowRuleViolation, after the
        violations are written); None: the rules file's policy, else "log".
      conflict: record the gradient cosine between losses on shared scopes.
      scopes: a `ScopeSpec` (include / exclude / max_depth) over scope names.
      grad_scaler: the `torch.amp.GradScaler` whose `scale()` scales the
        losses you hand `rec.backward`: norms are recorded unscaled, and a
        recorded step it skips (non-finite gradients) is a SKIPPED event.
      losses: {call-site name: loss name}, renaming the losses watch mode
        names by their call site ({"critic_loss": "critic"}).

    Under torch.distributed (DistributedDataParallel), build it after
    `init_process_group` on every rank: only rank 0 records and writes
    (`rec.rank`; elsewhere `rec.disabled` is True from the start), and a
    single loss's recorded gradient is DDP's all-reduced `.grad`.

    Several optimizers in one training step (DDPG, SAC, GANs, BYOL): put the
    step's body in `with rec.step():`, so it counts as one step whatever the
    number of `rec.backward` and `opt.step()` calls. Otherwise each
    `rec.backward` call is one step.

    Zero-code capture: inside `with rec.watch():` every `loss.backward()` is
    observed as if it were `rec.backward({"loss": loss})`, each loss named by
    its call site, and the optimizers that step the models' parameters are
    found when they first step (`_watch`).
    """

    def __init__(
        self,
        logdir: str | os.PathLike,
        every_n_steps: int = 10,
        models: Mapping[str, torch.nn.Module] | None = None,
        optimizers: Sequence[torch.optim.Optimizer] = (),
        pairs: Sequence[Any] | str = (),
        rules: Any = (),
        on_violation: str | None = None,
        conflict: bool = True,
        scopes: ScopeSpec | None = None,
        grad_scaler: torch.amp.GradScaler | None = None,
        losses: Mapping[str, str] | None = None,
    ):
        if (
            isinstance(every_n_steps, bool)
            or not isinstance(every_n_steps, int)
            or every_n_steps < 1
        ):
            raise ValueError(f"every_n_steps must be an int >= 1, got {every_n_steps!r}")
        models = dict(models or {})
        optimizers = list(optimizers)
        for i, opt in enumerate(optimizers):
            if not isinstance(opt, torch.optim.Optimizer):
                raise TypeError(
                    f"optimizers[{i}] is a {type(opt).__name__}, not a torch.optim.Optimizer"
                )
        if scopes is not None and not isinstance(scopes, ScopeSpec):
            raise TypeError(
                "scopes must be a tb_gradscope.ScopeSpec (include=, exclude=, max_depth=)"
            )
        loss_scale = LossScale(grad_scaler) if grad_scaler is not None else None
        renames = _renames(losses)
        self.logdir = os.fspath(logdir)
        self.every_n_steps = every_n_steps
        self.disabled = False
        self._serial = next(_SERIALS)
        names = name_parameters(models, optimizers, scopes)
        self.layout = names.layout
        rule_steps = HostRuleSteps(
            rules or [], on_violation, names.layout.scopes, f"Recorder '{self.logdir}'"
        )
        stepped = {id(p) for opt in optimizers for g in opt.param_groups for p in g["params"]}
        self.pairs = [
            p if isinstance(p, Pair) else pairs_lib.resolve(p, models)
            for p in _declared(pairs, models, optimizers)
        ]
        attrs = {"every_n_steps": every_n_steps, "recorder": RECORDER_NAME}
        drifts = [PairDrift(p, stepped, attrs, names.params) for p in self.pairs]
        infos = TableInfos(names.layout.scopes, attrs, rule_steps.checker.rule_texts)
        # Under torch.distributed only rank 0 records and writes (`_distributed`).
        self.rank = distributed.rank()
        writer = (
            RecordWriter(self.logdir, "tb_gradscope.torch")
            if self.rank == 0
            else distributed.Unwritten()
        )
        self._work = TorchRecording(
            writer,
            names,
            optimizers,
            drifts,
            rule_steps,
            infos,
            every_n_steps,
            conflict,
            loss_scale,
        )
        self._hooks = []
        self._closed = False
        port = RecorderPort(
            self._safely,
            self._enter_block,
            self._exit_block,
            self._adopt,
            self._before_optimizer_step,
            self._after_optimizer_step,
        )
        self._watch = BackwardWatch(self, self._work, port, renames)
        if self.rank != 0:
            self.disabled = True  # the user's backward only
            return
        self._hooks = [
            hook
            for opt in optimizers
            for hook in (
                opt.register_step_pre_hook(self._before_optimizer_step),
                opt.register_step_post_hook(self._after_optimizer_step),
            )
        ]
        self._safely(self._work.start_capture)  # step 0 analyses; its forward comes first

    # ----- the training loop's calls ---------------------------------------

    def backward(self, losses: Mapping[str, Any], *, inputs: Any = None) -> None:
        """The backward of the sum of `losses` ({name: scalar loss or StartPoint}),
        bitwise what `sum(losses.values()).backward()` gives; at a recorded step
        each loss's own gradient per scope is recorded too."""
        losses = check_losses(losses)
        if not self.disabled:
            self._safely(self._before_backward, losses, inputs is None)
        try:
            if self._watch.active:
                with self._watch.paused():  # watched, this backward is not a second one
                    user_backward(losses, inputs)
            else:
                user_backward(losses, inputs)
        except BaseException:
            self.backward_failed()
            raise
        self.backward_observed()

    # ----- a backward someone else runs (watch mode, the SB3 and Lightning callbacks)

    def observe_backward(self, losses: Mapping[str, Any], *, hooks_allowed: bool = True) -> None:
        """Before a backward of the sum of `losses` that the caller runs itself
        (a framework's `loss.backward()`): at a recorded step, each loss's own
        gradient per scope is recorded. Follow with `backward_observed()` once
        that backward ran, or `backward_failed()` if it raised. `hooks_allowed`:
        the backward accumulates every reached parameter's gradient (no `inputs=`)."""
        if not self.disabled:
            self._safely(self._before_backward, check_losses(losses), hooks_allowed)

    def backward_observed(self) -> None:
        """After the backward announced by `observe_backward`: its gradients are in `.grad`."""
        if not self.disabled:
            self._safely(self._work.after_backward)

    def backward_failed(self) -> None:
        """The backward announced by `observe_backward` raised: its gradient hooks go."""
        self._work.drop_hooks()

    def record_gradients(
        self, grads: Mapping[str, Sequence[torch.Tensor | None] | Mapping[torch.Tensor, Any]]
    ) -> None:
        """Records gradients the user computed with `torch.autograd.grad`, as one
        step (or as part of a `rec.step()` block): {loss: {parameter: gradient}}
        or {loss: gradients index-aligned with `rec.parameters`}; None: no gradient."""
        if self.disabled:
            return
        self._safely(self._record_given, grads)

    @contextlib.contextmanager
    def step(self) -> Iterator[Recorder]:
        """One training step of several backwards and optimizer steps (DDPG, SAC, BYOL)."""
        if self._work.in_block and not self._watch.step_open:
            raise RuntimeError("rec.step() blocks do not nest; close the first before the next")
        if not self.disabled:
            self._safely(self._watch.end_step)  # the block overrides watch mode's boundary
        if not self.disabled:
            self._safely(self._enter_block)
        try:
            yield self
        finally:
            if not self.disabled:
                self._safely(self._exit_block)
            self._work.in_block = False

    def watch(self) -> _Watching:
        """Observes every `Tensor.backward()` / `torch.autograd.backward` call on
        this thread until `unwatch()` (or the end of a `with rec.watch():`
        block): no change to the training code. Each loss is named by its call
        site (`critic_loss.backward()` -> "critic_loss", else "file:line"),
        renamed by `losses=`; a backward whose loss the step already saw, after
        an optimizer step, begins the next step; optimizers holding recorded
        parameters are adopted when they first step."""
        if self._closed:
            raise RuntimeError(
                f"Recorder '{self.logdir}' is closed; a closed recorder cannot watch"
            )
        if self._watch.active:
            raise RuntimeError(
                f"Recorder '{self.logdir}' is already watching; rec.watch() does not nest"
            )
        if not self.disabled:
            self._watch.start()
        return _Watching(self)

    def unwatch(self) -> None:
        """Stops watching: `Tensor.backward` and `torch.autograd.backward` are
        torch's again, and the step watch mode opened is closed (it is written
        at the next step or `close()`)."""
        if not self._watch.active:
            return
        self._watch.stop()
        if not self.disabled:
            self._safely(self._watch.end_step)

    @property
    def step_count(self) -> int:
        """The current step number (0-based): the step in progress, else the next."""
        return self._work.step

    global_step = step_count

    @property
    def in_step(self) -> bool:
        """Whether a `rec.step()` block is open (outside one, a backward begins a step)."""
        return self._work.in_block

    @property
    def observing(self) -> bool:
        """Whether the step in progress is recorded or analysed: a callback names
        its losses only then (elsewhere a backward costs the step counter)."""
        return not self.disabled and self._work.work is not None

    @property
    def parameters(self) -> tuple[torch.Tensor, ...]:
        """The recorded parameters, in layout order (for `record_gradients`)."""
        return self._work.params

    @property
    def violations(self) -> list:
        """Every rule violation seen so far (also written as EVENTS records)."""
        return list(self._work.rules.violations)

    def close(self) -> None:
        """Ends the step in progress, writes what it recorded and closes the event file."""
        if self._closed:
            return
        self._closed = True
        self.unwatch()
        for hook in self._hooks:
            hook.remove()
        try:
            if not self.disabled and self._work.open:
                self._safely(self._work.end_step)  # may raise FlowRuleViolation
        finally:
            self._work.stop_capture()
            try:
                self._work.writer.close()
            except Exception as e:  # noqa: BLE001 - closing must never break the loop
                self._step_aside(e)

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # ----- internals --------------------------------------------------------

    def _before_backward(self, losses: Mapping[str, Any], hooks_allowed: bool) -> None:
        if not self._work.in_block:
            self._work.begin_step()
        self._work.before_backward(losses, hooks_allowed)

    def _record_given(self, grads: Mapping[str, Any]) -> None:
        params = self._work.params
        index = self._work.index
        aligned: dict[str, list[torch.Tensor | None]] = {}
        reach: dict[str, set[int]] = {}
        for name, given in grads.items():
            if isinstance(given, Mapping):
                column: list[torch.Tensor | None] = [None] * len(params)
                for p, g in given.items():
                    if id(p) in index:
                        column[index[id(p)]] = g
            else:
                column = list(given)
                if len(column) != len(params):
                    raise ValueError(
                        f"record_gradients: loss '{name}' has {len(column)} gradients for "
                        f"{len(params)} recorded parameters; pass {{parameter: gradient}}"
                    )
            aligned[name] = column
            reach[name] = {i for i, g in enumerate(column) if g is not None}
        if not self._work.in_block:
            self._work.begin_step()
        self._work.record_given(aligned, reach)
        if not self._work.in_block:
            self._work.stop_capture()
            self._work.backwards_done()

    def _enter_block(self) -> None:
        self._work.begin_step()
        self._work.in_block = True

    def _exit_block(self) -> None:
        self._work.in_block = False
        self._work.stop_capture()
        self._work.backwards_done()

    def _adopt(self, optimizer: torch.optim.Optimizer) -> bool:
        """Watch mode found an optimizer; adopted if it steps a recorded parameter."""
        if any(opt is optimizer for opt in self._work.optimizers):
            return False  # given: its own hooks observe it
        return self._work.add_optimizer(optimizer)

    def _before_optimizer_step(
        self, optimizer: torch.optim.Optimizer, args: tuple = (), kwargs: Mapping | None = None
    ) -> None:
        """A step pre-hook: the gradients it applies are in `.grad` now, unless
        a closure computes them inside the step (then the post-hook reads them)."""
        if not _has_closure(args, kwargs):
            self._optimizer_stepping(optimizer)

    def _after_optimizer_step(
        self, optimizer: torch.optim.Optimizer, args: tuple = (), kwargs: Mapping | None = None
    ) -> None:
        """A step post-hook: `optimizer.step(closure)` (LBFGS, Lightning's automatic
        optimization) ran its backward after the pre-hook; `.grad` holds it now."""
        if _has_closure(args, kwargs):
            self._optimizer_stepping(optimizer)

    def _optimizer_stepping(self, optimizer: torch.optim.Optimizer) -> None:
        if self.disabled or self._work.work is None:
            return
        self._safely(self._work.before_optimizer_step, optimizer)

    def _safely(self, action: Callable[..., Any], *args: Any) -> Any:
        try:
            return action(*args)
        except FlowRuleViolation:
            raise
        except Exception as e:  # noqa: BLE001 - the recorder must never kill the loop
            self._step_aside(e)
            return None

    def _step_aside(self, error: Exception) -> None:
        self.disabled = True
        self._watch.stop()
        self._work.drop_hooks()
        self._work.stop_capture()
        for hook in self._hooks:
            hook.remove()
        warn_once(
            ("torch_recorder_failed", self._serial),
            f"tb_gradscope: Recorder '{self.logdir}' stopped recording after an error "
            f"({type(error).__name__}: {error}); training continues unaffected",
        )


class _Watching:
    """`rec.watch()`'s result: watching has begun; leaving its `with` block unwatches."""

    def __init__(self, recorder: Recorder):
        self._rec = recorder

    def __enter__(self) -> Recorder:
        return self._rec

    def __exit__(self, *exc: Any) -> None:
        self._rec.unwatch()


def _renames(losses: Mapping[str, str] | None) -> dict[str, str]:
    renames = dict(losses or {})
    for old, new in renames.items():
        if not isinstance(old, str) or not isinstance(new, str) or not new:
            raise TypeError(f"losses={{{old!r}: {new!r}}}: map call-site names to loss names")
        if "|" in new or "/" in new:
            raise ValueError(f"losses: loss name {new!r}: use a string without '|' or '/'")
    return renames


def _has_closure(args: tuple, kwargs: Mapping | None) -> bool:
    """Whether `optimizer.step` was called with a closure (positional or keyword)."""
    closure = args[0] if args else (kwargs or {}).get("closure")
    return closure is not None


def _declared(
    pairs: Sequence[Any] | str,
    models: Mapping[str, torch.nn.Module],
    optimizers: Sequence[torch.optim.Optimizer],
) -> list[Any]:
    if isinstance(pairs, str):
        if pairs != "auto":
            raise ValueError(f"pairs={pairs!r}: pass 'auto' or a list of pair_models(...) results")
        return pairs_lib.detect(models, optimizers)
    out = list(pairs)
    for i, p in enumerate(out):
        if not isinstance(p, (pairs_lib.ModelPair, Pair)):
            raise TypeError(
                f"pairs[{i}] is a {type(p).__name__}; pass pair_models(target, online, tau=|every=)"
            )
    return out
