"""Every `GradientTape.gradient` (and `tf.gradients`) call a step makes, seen as it is made.

Shared by the Keras callback (the losses of a custom `train_step`) and
`Recorder.watch` (the losses of any TF2 step function). While `observe(calls)`
is open on a thread, each `tf.GradientTape.gradient` call that thread makes
runs unchanged and is then handed to `calls.seen`: its target, the variables
its tape watched, its sources and the gradients it returned, and where it was
called from. Calls made from one place (the same Python stack: a loop of WGAN
critic steps) share one `site`.

A receiver may ask for the terms of a summed loss (`TapeCalls.terms_of`: the
local names the calling code holds them under). Their gradients need a second
pass over the tape, so while such a receiver observes, the tapes its thread
makes are persistent (a call inside the tape's context then stops recording
for the call only, as a plain tape stops for good): each term is then
differentiated on the same tape after the step's own call, which runs first
and unchanged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import threading
import weakref
from collections.abc import Iterator, Mapping
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private


@dataclasses.dataclass
class TapedLoss:
    """One `tape.gradient` call: what it differentiated and where it was made.

    Attributes:
      target: the tensor differentiated.
      watched: the variables its tape watched.
      site: (file, line) of every frame of the call.
      sources: the `sources` argument as given (any nest).
      grads: what the call returned (the same nest).
      output_gradients: the seed given, or None.
      called_as: the name the calling code holds `target` under (a local
        variable of the first user frame), or None.
      tape: the tape the call was made on.
      shape: when `target` stands for a per-sample loss's sum (the Keras
        callback records that), the loss's shape; `given` is then the tensor
        the step differentiated.
      terms: {name: (tensor, its gradients)} of the terms `TapeCalls.terms_of`
        asked for, in order; None when none was asked, or when one could not
        be had (`terms_missing` says why).
    """

    target: Any
    watched: list[Any]
    site: tuple[tuple[str, int], ...] = ()
    sources: Any = None
    grads: Any = None
    output_gradients: Any = None
    called_as: str | None = None
    tape: Any = None
    shape: tuple | None = None
    given: Any = None
    terms: dict[str, tuple[Any, Any]] | None = None
    terms_missing: str = ""

    @property
    def named_by(self) -> int:
        """id() of the tensor the step differentiated (what its logs may hold)."""
        return id(self.target if self.given is None else self.given)


class TapeCalls:
    """Receives the calls seen while `observe` is open (override `seen`)."""

    def __init__(self) -> None:
        self.taped: list[TapedLoss] = []

    def seen(self, taped: TapedLoss) -> None:
        self.taped.append(taped)

    def terms_of(self, called_as: str | None) -> tuple[str, ...]:
        """The local names of the terms summed into the target held as
        `called_as`, each to be differentiated on its own; () for none."""
        return ()

    @property
    def wants_terms(self) -> bool:
        """Whether any target may have terms (tapes made meanwhile are persistent)."""
        return False


_current = threading.local()  # .calls: the TapeCalls this thread hands calls to
_original_gradient = tf.GradientTape.gradient
_original_init = tf.GradientTape.__init__
_original_tf_gradients = tf.gradients
_made_persistent: weakref.WeakSet = weakref.WeakSet()  # tapes persistent only for the terms
_lock = threading.Lock()
_depth = 0
# Frames of TensorFlow, Keras and the standard library are not the user's: a
# name is looked up above them.
_TF_DIR = os.path.dirname(os.path.abspath(tf.__file__))
_LIBRARY_DIRS = (
    _TF_DIR + os.sep,
    os.path.join(os.path.dirname(_TF_DIR), "keras") + os.sep,
    os.path.dirname(os.path.abspath(contextlib.__file__)) + os.sep,
)
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def _observed_init(tape: tf.GradientTape, persistent: bool = False, *args: Any, **kw: Any) -> None:
    calls = getattr(_current, "calls", None)
    forced = not persistent and calls is not None and calls.wants_terms
    _original_init(tape, persistent or forced, *args, **kw)
    if forced:
        _made_persistent.add(tape)


def _observed_gradient(
    tape: tf.GradientTape, target: Any, sources: Any, *args: Any, **kwargs: Any
) -> Any:
    if tape not in _made_persistent:
        grads = _original_gradient(tape, target, sources, *args, **kwargs)
    else:
        with _quiet(tape):
            grads = _original_gradient(tape, target, sources, *args, **kwargs)
    calls = getattr(_current, "calls", None)
    if calls is not None and tf.is_tensor(target):
        seeds = kwargs.get("output_gradients", args[0] if args else None)
        site, called_as, names = _call_site(target)
        taped = TapedLoss(
            target,
            list(tape.watched_variables()),
            site,
            sources,
            grads,
            seeds,
            called_as,
            tape,
        )
        wanted = calls.terms_of(called_as)
        if wanted:
            taped.terms, taped.terms_missing = _terms(tape, wanted, names, sources)
        calls.seen(taped)
    return grads


def _quiet(tape: tf.GradientTape) -> contextlib.AbstractContextManager:
    """A call on a tape made persistent for the terms, inside its context, stops
    recording for the call only (a plain tape stops for good: nothing later
    on it is differentiated), so no gradient op is recorded on it."""
    return tape.stop_recording() if private.tape_is_recording(tape) else contextlib.nullcontext()


def _terms(
    tape: tf.GradientTape, wanted: tuple[str, ...], names: Mapping[str, Any], sources: Any
) -> tuple[dict[str, tuple[Any, Any]] | None, str]:
    """Each wanted term's tensor and its gradients on `tape`, or (None, why not)."""
    missing = [n for n in wanted if not tf.is_tensor(names.get(n))]
    if missing:
        return None, f"the code holds no tensor named {', '.join(map(repr, missing))} there"
    if not private.tape_is_persistent(tape):
        return None, "its tape was made outside the watched step, and was used up by the call"
    terms = {}
    for name in wanted:
        with _quiet(tape):
            terms[name] = (names[name], _original_gradient(tape, names[name], sources))
    return terms, ""


@tf.autograph.experimental.do_not_convert
def _observed_tf_gradients(ys: Any, xs: Any, grad_ys: Any = None, *args: Any, **kwargs: Any) -> Any:
    grads = _original_tf_gradients(ys, xs, grad_ys, *args, **kwargs)
    calls = getattr(_current, "calls", None)
    single = ys[0] if isinstance(ys, (list, tuple)) and len(ys) == 1 else ys
    if calls is not None and tf.is_tensor(single):
        seeds = grad_ys[0] if isinstance(grad_ys, (list, tuple)) and len(grad_ys) == 1 else grad_ys
        site, called_as, _ = _call_site(single)
        calls.seen(TapedLoss(single, [], site, xs, grads, seeds, called_as, None))
    return grads


def _call_site(
    target: Any,
) -> tuple[tuple[tuple[str, int], ...], str | None, Mapping[str, Any]]:
    """Where `tape.gradient` was called from: (file, line) of every frame above
    the observer (a helper called from two lines is two sites, a loop one), the
    local name the first frame holding `target` gives it, and that frame's
    locals (where the terms of a summed target are looked up)."""
    site = []
    called_as, names = None, {}
    frame = inspect.currentframe()
    frame = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    while frame is not None:
        filename = frame.f_code.co_filename
        site.append((filename, frame.f_lineno))
        if called_as is None and not filename.startswith(_LIBRARY_DIRS + (_OWN_DIR,)):
            local = frame.f_locals
            called_as = next(
                (k for k, v in local.items() if v is target and not k.startswith("_")), None
            )
            if called_as is not None:
                names = dict(local)
        frame = frame.f_back
    return tuple(site), called_as, names


@contextlib.contextmanager
def observe(calls: TapeCalls) -> Iterator[TapeCalls]:
    """While open, this thread's `GradientTape.gradient` and `tf.gradients`
    calls go to `calls` (a `tf.gradients` call has no tape: `tape` is None)."""
    global _depth
    previous = getattr(_current, "calls", None)
    _current.calls = calls
    with _lock:
        _depth += 1
        tf.GradientTape.gradient = _observed_gradient
        tf.GradientTape.__init__ = _observed_init
        tf.gradients = _observed_tf_gradients
    try:
        yield calls
    finally:
        _current.calls = previous
        with _lock:
            _depth -= 1
            if _depth == 0:
                tf.GradientTape.gradient = _original_gradient
                tf.GradientTape.__init__ = _original_init
                tf.gradients = _original_tf_gradients
