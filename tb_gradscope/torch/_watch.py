"""Watch mode: a Recorder that sees every backward without a change to the training code.

While a recorder watches (`rec.watch()`), `torch.autograd.backward` (which
`Tensor.backward` calls by its module attribute) is a wrapper that, on the
thread that started watching:

- names the backward's losses by its call site (`_call_site`), renamed by the
  recorder's `losses=` mapping;
- keeps the step boundary: a backward whose loss name the step in progress
  already saw, with an optimizer step since the step began, begins the next
  step (DQN's `td, td` is two steps; SAC's `ent, critic, actor` one; a
  gradient accumulated over `td, td, td` before `opt.step()` one). Each step
  is a `rec.step()` block of the recorder's own; a user's `with rec.step():`
  overrides the rule;
- on a step that records or analyses, observes the backward
  (`observe_backward` before it, `backward_observed` after it); on any other
  step, only the step counter moves.

A global optimizer step pre-hook counts optimizer steps for that rule and
adopts an optimizer whose parameter groups hold a recorded parameter the
first time it steps, as if it had been passed in `optimizers=`; any other
optimizer costs a dict lookup. The user's backward always runs, exactly once
and with exactly its arguments (a `FlowRuleViolation` of `on_violation="raise"`
comes out of it after it ran); other threads' backwards, backwards nested
in an observed one and the recorder's own pass through untouched. One
recorder watches at a time. Unwatching (also at `close()` and when the
recorder steps aside after an error) puts the original function back.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook

from tb_gradscope.rules import FlowRuleViolation
from tb_gradscope.torch import _call_site
from tb_gradscope.torch._losses import StartPoint

_ADOPTED, _OTHER = "adopted", "other"
# The recorder watching now, if any: one at a time.
_watching: list[Any] = []


class Watch:
    """One recorder's watch of `torch.autograd.backward` and the optimizers' steps."""

    def __init__(self, recorder: Any, renames: Mapping[str, str]):
        self._rec = recorder
        self._renames = dict(renames)
        self._thread = threading.get_ident()
        self._original: Any = None
        self._wrapper: Any = None
        self._hook: Any = None
        self._busy = 0
        self._known: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.step_open = False
        self._seen: set[str] = set()
        self._stepped = False
        self.backwards = 0  # every backward seen on the watching thread

    # ----- on and off -------------------------------------------------------

    def start(self) -> None:
        """Installs the wrapper and the global optimizer hook."""
        if _watching:
            raise RuntimeError(
                f"Recorder '{_watching[0].logdir}' is already watching; call its unwatch() "
                "(or leave its `with rec.watch():` block) before another recorder watches"
            )
        original = torch.autograd.backward

        def backward(*args: Any, **kwargs: Any) -> None:
            return self._backward(original, args, kwargs)

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        backward.__doc__ = original.__doc__
        self._original, self._wrapper = original, backward
        self._hook = register_optimizer_step_pre_hook(self._optimizer_step)
        torch.autograd.backward = backward
        _watching.append(self._rec)

    def stop(self) -> None:
        """Puts the original `torch.autograd.backward` back and removes the hook.
        (If something else replaced the wrapper since, that replacement stays;
        the wrapper, left inside it, passes every call through.)"""
        if self._wrapper is None:
            return
        if torch.autograd.backward is self._wrapper:
            torch.autograd.backward = self._original
        self._wrapper = None
        self._hook.remove()
        if self._rec in _watching:
            _watching.remove(self._rec)

    @property
    def active(self) -> bool:
        return self._wrapper is not None

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The recorder's own backward (`rec.backward`) passes through."""
        self._busy += 1
        try:
            yield
        finally:
            self._busy -= 1

    # ----- the step boundary ----------------------------------------------

    def end_step(self) -> None:
        """Closes the step the watch opened (at unwatch, close, a user's block)."""
        if self.step_open:
            self.step_open = False
            self._rec._exit_block()

    def _boundary(self, names: tuple[str, ...]) -> None:
        rec = self._rec
        if rec._work.in_block and not self.step_open:
            return  # inside the user's `with rec.step():`: one step
        if not self.step_open or (self._stepped and not self._seen.isdisjoint(names)):
            if self.step_open:
                self.step_open = False
                rec._exit_block()
            rec._enter_block()
            self.step_open = True
            self._seen.clear()
            self._stepped = False
        self._seen.update(names)

    # ----- the wrapper and the hook ----------------------------------------

    def _backward(self, original: Any, args: tuple, kwargs: dict) -> None:
        observed = False
        violation = None
        if (
            self._wrapper is not None
            and not self._busy
            and not self._rec.disabled
            and threading.get_ident() == self._thread
        ):
            self._busy += 1
            try:
                observed = bool(self._rec._safely(self._before, args, kwargs))
            except FlowRuleViolation as e:  # on_violation="raise", as the step ended
                violation = e
            finally:
                self._busy -= 1
        if not observed:
            result = original(*args, **kwargs)
            if violation is not None:
                raise violation  # after the user's backward ran, as it always does
            return result
        self._busy += 1  # a backward nested in this one passes through
        try:
            result = original(*args, **kwargs)
        except BaseException:
            self._rec._safely(self._rec.backward_failed)
            raise
        finally:
            self._busy -= 1
        self._rec.backward_observed()
        return result

    def _before(self, args: tuple, kwargs: dict) -> bool:
        """The counter and the boundary; at a recording or analysing step, the
        observation. True: the backward is observed."""
        self.backwards += 1
        tensors, grads, inputs = _bind(*args, **kwargs)
        frame = _call_site.user_frame(sys._getframe())
        count = len(tensors)
        if frame is None:
            names = tuple(f"backward[{k}]" for k in range(count)) if count > 1 else ("backward",)
        else:
            names = _call_site.loss_names(frame, count)
        names = _unique(tuple(self._renames.get(n, n) for n in names))
        self._boundary(names)
        work = self._rec._work
        if work.work is None:
            return False  # a step that neither records nor analyses: the counter only
        losses = _losses(names, tensors, grads)
        if losses is None:
            return False  # nothing a loss can stand for (a GradientEdge, a shape torch rejects)
        self._rec.observe_backward(losses, hooks_allowed=inputs is None)
        return work.work is not None and not self._rec.disabled

    def _optimizer_step(self, optimizer: torch.optim.Optimizer, *args: Any) -> None:
        if self._wrapper is None or threading.get_ident() != self._thread:
            return None
        self._stepped = True
        known = self._known.get(optimizer)
        if known is None:
            rec = self._rec
            adopted = not rec.disabled and bool(rec._safely(rec._adopt, optimizer))
            known = self._known[optimizer] = _ADOPTED if adopted else _OTHER
        if known is _ADOPTED:
            self._rec._before_optimizer_step(optimizer)
        return None


def _bind(
    tensors: Any,
    grad_tensors: Any = None,
    retain_graph: Any = None,
    create_graph: Any = False,
    grad_variables: Any = None,
    inputs: Any = None,
) -> tuple[list[Any], list[Any], Any]:
    """`torch.autograd.backward`'s arguments: (tensors, their grads, inputs)."""
    if grad_tensors is None:
        grad_tensors = grad_variables
    tensors = [tensors] if isinstance(tensors, torch.Tensor) else list(tensors)
    if grad_tensors is None:
        grads = [None] * len(tensors)
    elif isinstance(grad_tensors, torch.Tensor):
        grads = [grad_tensors]
    else:
        grads = list(grad_tensors)
    return tensors, grads, inputs


def _losses(names: tuple[str, ...], tensors: list[Any], grads: list[Any]) -> dict | None:
    """{name: scalar loss or StartPoint}, or None when some tensor is none."""
    if len(grads) != len(tensors):
        return None
    losses: dict[str, Any] = {}
    for name, tensor, grad in zip(names, tensors, grads):
        if not isinstance(tensor, torch.Tensor) or not tensor.requires_grad:
            return None
        if grad is None:
            if tensor.numel() != 1:
                return None
            losses[name] = tensor
        elif isinstance(grad, torch.Tensor) and grad.shape == tensor.shape:
            losses[name] = StartPoint(tensor, grad)
        else:
            return None
    return losses


def _unique(names: tuple[str, ...]) -> tuple[str, ...]:
    """A list backward naming one loss twice (`[x, x]`): the second is `x#1`."""
    if len(set(names)) == len(names):
        return names
    out: list[str] = []
    for name in names:
        k, candidate = 0, name
        while candidate in out:
            k += 1
            candidate = f"{name}#{k}"
        out.append(candidate)
    return tuple(out)
