"""Watch mode: a Recorder that sees every backward without a change to the training code.

While a recorder watches (`rec.watch()`), `Tensor.backward` and
`torch.autograd.backward` are wrappers that, on the thread that started
watching:

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
recorder steps aside after an error) puts the original functions back.

`Tensor.backward` is wrapped itself, not only the `torch.autograd.backward`
it calls: at an analysing step the capture's TorchFunctionMode dispatches
`Tensor.backward` with the mode taken off its stack for the call, so work
done inside (turning the capture off) would be undone when the mode goes
back on. The wrapper runs before that dispatch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from tb_gradscope.rules import FlowRuleViolation
from tb_gradscope.torch import _call_site
from tb_gradscope.torch._losses import StartPoint

_ADOPTED, _OTHER = "adopted", "other"
# The watch on now, if any: one at a time.
_watching: list[BackwardWatch] = []


@dataclasses.dataclass(frozen=True)
class RecorderPort:
    """What watch mode calls on its Recorder, as bound methods (the recorder's
    public `observe_backward` / `backward_observed` / `backward_failed` besides)."""

    safely: Callable[..., Any]  # runs a call; an error steps the recorder aside
    enter_block: Callable[[], None]  # begins a step holding several backwards
    exit_block: Callable[[], None]  # that step's backwards are done
    adopt: Callable[[torch.optim.Optimizer], bool]  # True: it steps recorded parameters
    before_optimizer_step: Callable[..., None]  # (optimizer, args, kwargs): a step pre-hook
    after_optimizer_step: Callable[..., None]  # (optimizer, args, kwargs): a step post-hook


class BackwardWatch:
    """One recorder's watch of the backwards and the optimizers' steps.

    Args:
      recorder: the Recorder (its public API).
      recording: its TorchRecording (`in_block`, `work`: the step's state;
        `next_watched_step`, the boundary).
      port: the recorder's own calls watch mode makes.
      renames: {call-site name: loss name}, the recorder's `losses=`.
    """

    def __init__(
        self, recorder: Any, recording: Any, port: RecorderPort, renames: Mapping[str, str]
    ):
        self._rec = recorder
        self.logdir = recorder.logdir
        self._recording = recording
        self._port = port
        self._renames = dict(renames)
        self._thread = threading.get_ident()
        self._originals: dict[str, Any] = {}
        self._wrappers: dict[str, Any] = {}
        self._hooks: tuple[Any, ...] = ()
        self._busy = 0
        self._known: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self.step_open = False
        self._seen: set[str] = set()
        self._stepped = False
        self.backwards = 0  # every backward seen on the watching thread

    # ----- on and off -------------------------------------------------------

    def start(self) -> None:
        """Installs the wrappers and the global optimizer hook."""
        if _watching:
            raise RuntimeError(
                f"Recorder '{_watching[0].logdir}' is already watching; call its unwatch() "
                "(or leave its `with rec.watch():` block) before another recorder watches"
            )
        self._thread = threading.get_ident()
        for owner, name, bind in _TARGETS:
            original = owner.backward
            self._originals[name], self._wrappers[name] = original, self._wrap(original, bind)
        self._hooks = (
            register_optimizer_step_pre_hook(self._optimizer_step),
            register_optimizer_step_post_hook(self._optimizer_stepped),
        )
        for owner, name, _ in _TARGETS:
            owner.backward = self._wrappers[name]
        _watching.append(self)

    def stop(self) -> None:
        """Puts the original functions back and removes the hook. (A function
        something else replaced our wrapper with since stays; the wrapper, left
        inside it, passes every call through.)"""
        if not self._wrappers:
            return
        for owner, name, _ in _TARGETS:
            if owner.backward is self._wrappers[name]:
                owner.backward = self._originals[name]
        self._wrappers = {}
        for hook in self._hooks:
            hook.remove()
        if self in _watching:
            _watching.remove(self)

    @property
    def active(self) -> bool:
        return bool(self._wrappers)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """A backward run inside passes through (the recorder's own `rec.backward`,
        `Tensor.backward`'s own `torch.autograd.backward`). Only the watching
        thread's count moves: another thread's backwards pass through anyway."""
        mine = threading.get_ident() == self._thread
        self._busy += mine
        try:
            yield
        finally:
            self._busy -= mine

    # ----- the step boundary ----------------------------------------------

    def end_step(self) -> None:
        """Closes the step the watch opened (at unwatch, close, a user's block)."""
        if self.step_open:
            self.step_open = False
            self._port.exit_block()

    def _boundary(self, names: tuple[str, ...]) -> None:
        if self._recording.in_block and not self.step_open:
            return  # inside the user's `with rec.step():`: one step
        if not self.step_open or (self._stepped and not self._seen.isdisjoint(names)):
            if self.step_open:
                self.step_open = False
                self._recording.next_watched_step()
            else:
                self._port.enter_block()
            self.step_open = True
            self._seen.clear()
            self._stepped = False
        self._seen.update(names)

    # ----- the wrappers and the hook ----------------------------------------

    def _wrap(self, original: Any, bind: Callable[..., tuple]) -> Any:
        def backward(*args: Any, **kwargs: Any) -> Any:
            return self._backward(original, bind, args, kwargs)

        backward.__wrapped__ = original  # type: ignore[attr-defined]
        backward.__doc__ = original.__doc__
        backward.__name__ = backward.__qualname__ = original.__qualname__
        return backward

    def _backward(
        self, original: Any, bind: Callable[..., tuple], args: tuple, kwargs: dict
    ) -> Any:
        observed = False
        violation = None
        mine = threading.get_ident() == self._thread
        if mine and self._wrappers and not self._busy and not self._rec.disabled:
            self._busy += 1
            try:
                observed = bool(self._port.safely(self._before, bind, args, kwargs))
            except FlowRuleViolation as e:  # on_violation="raise", as the step ended
                violation = e
            finally:
                self._busy -= 1
        if not observed:
            with self.paused():  # Tensor.backward's own torch.autograd.backward
                result = original(*args, **kwargs)
            if violation is not None:
                raise violation  # after the user's backward ran, as it always does
            return result
        self._busy += 1  # a backward nested in this one passes through
        try:
            result = original(*args, **kwargs)
        except BaseException:
            self._port.safely(self._rec.backward_failed)
            raise
        finally:
            self._busy -= 1
        self._rec.backward_observed()
        return result

    def _before(self, bind: Callable[..., tuple], args: tuple, kwargs: dict) -> bool:
        """The counter and the boundary; at a recording or analysing step, the
        observation. True: the backward is observed."""
        self.backwards += 1
        try:
            tensors, grads, inputs = bind(*args, **kwargs)
        except TypeError:
            return False  # arguments torch will reject itself: the user's error, not ours
        frame = _call_site.user_frame(sys._getframe())
        count = len(tensors)
        if frame is None:
            names = tuple(f"backward[{k}]" for k in range(count)) if count > 1 else ("backward",)
        else:
            names = _call_site.loss_names(frame, count)
        names = _unique(tuple(self._renames.get(n, n) for n in names))
        self._boundary(names)
        if self._recording.work is None:
            return False  # a step that neither records nor analyses: the counter only
        losses = _losses(names, tensors, grads)
        if losses is None:
            return False  # nothing a loss can stand for (a GradientEdge, a shape torch rejects)
        self._rec.observe_backward(losses, hooks_allowed=inputs is None)
        return self._recording.work is not None and not self._rec.disabled

    def _optimizer_step(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        if not self._wrappers or threading.get_ident() != self._thread:
            return None
        self._stepped = True
        known = self._known.get(optimizer)
        if known is None:
            adopted = not self._rec.disabled and bool(
                self._port.safely(self._port.adopt, optimizer)
            )
            known = self._known[optimizer] = _ADOPTED if adopted else _OTHER
        if known is _ADOPTED:
            self._port.before_optimizer_step(optimizer, args, kwargs)
        return None

    def _optimizer_stepped(
        self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict
    ) -> None:
        if threading.get_ident() == self._thread and self._known.get(optimizer) is _ADOPTED:
            self._port.after_optimizer_step(optimizer, args, kwargs)


def _bind_autograd(
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


def _bind_tensor(
    tensor: Any,
    gradient: Any = None,
    retain_graph: Any = None,
    create_graph: Any = False,
    inputs: Any = None,
) -> tuple[list[Any], list[Any], Any]:
    """`Tensor.backward`'s arguments: (tensors, their grads, inputs)."""
    return [tensor], [gradient], inputs


# (owner of a `backward` attribute, its name, its arguments' binder).
_TARGETS: tuple[tuple[Any, str, Callable[..., tuple]], ...] = (
    (torch.Tensor, "Tensor.backward", _bind_tensor),
    (torch.autograd, "torch.autograd.backward", _bind_autograd),
)


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
