"""Every `GradientTape.gradient` (and `tf.gradients`) call a step makes, seen as it is made.

Shared by the Keras callback (the losses of a custom `train_step`) and
`Recorder.watch` (the losses of any TF2 step function). While `observe(calls)`
is open on a thread, each `tf.GradientTape.gradient` call that thread makes
runs unchanged and is then handed to `calls.seen`: its target, the variables
its tape watched, its sources and the gradients it returned, and where it was
called from. Calls made from one place (the same Python stack: a loop of WGAN
critic steps) share one `site`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import threading
from collections.abc import Iterator
from typing import Any

import tensorflow as tf


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


_current = threading.local()  # .calls: the TapeCalls this thread hands calls to
_original_gradient = tf.GradientTape.gradient
_original_tf_gradients = tf.gradients
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


def _observed_gradient(
    tape: tf.GradientTape, target: Any, sources: Any, *args: Any, **kwargs: Any
) -> Any:
    grads = _original_gradient(tape, target, sources, *args, **kwargs)
    calls = getattr(_current, "calls", None)
    if calls is not None and tf.is_tensor(target):
        seeds = kwargs.get("output_gradients", args[0] if args else None)
        site, called_as = _call_site(target)
        calls.seen(
            TapedLoss(
                target,
                list(tape.watched_variables()),
                site,
                sources,
                grads,
                seeds,
                called_as,
                tape,
            )
        )
    return grads


@tf.autograph.experimental.do_not_convert
def _observed_tf_gradients(ys: Any, xs: Any, grad_ys: Any = None, *args: Any, **kwargs: Any) -> Any:
    grads = _original_tf_gradients(ys, xs, grad_ys, *args, **kwargs)
    calls = getattr(_current, "calls", None)
    single = ys[0] if isinstance(ys, (list, tuple)) and len(ys) == 1 else ys
    if calls is not None and tf.is_tensor(single):
        seeds = grad_ys[0] if isinstance(grad_ys, (list, tuple)) and len(grad_ys) == 1 else grad_ys
        site, called_as = _call_site(single)
        calls.seen(TapedLoss(single, [], site, xs, grads, seeds, called_as, None))
    return grads


def _call_site(target: Any) -> tuple[tuple[tuple[str, int], ...], str | None]:
    """Where `tape.gradient` was called from: (file, line) of every frame above
    the observer (a helper called from two lines is two sites, a loop one), and
    the local name the first frame holding `target` gives it."""
    site = []
    called_as = None
    frame = inspect.currentframe()
    frame = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    while frame is not None:
        filename = frame.f_code.co_filename
        site.append((filename, frame.f_lineno))
        if called_as is None and not filename.startswith(_LIBRARY_DIRS + (_OWN_DIR,)):
            called_as = next(
                (k for k, v in frame.f_locals.items() if v is target and not k.startswith("_")),
                None,
            )
        frame = frame.f_back
    return tuple(site), called_as


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
        tf.gradients = _observed_tf_gradients
    try:
        yield calls
    finally:
        _current.calls = previous
        with _lock:
            _depth -= 1
            if _depth == 0:
                tf.GradientTape.gradient = _original_gradient
                tf.gradients = _original_tf_gradients
