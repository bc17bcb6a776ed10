"""Every Keras 3 optimizer apply a step makes, handed to a hook that applies it.

`Recorder.watch` routes a watched step's `optimizer.apply_gradients(...)` and
`optimizer.apply(grads, variables)` calls through `Recorder.apply`, which
applies the very same gradients to the same variables (Keras's
`apply_gradients` is `apply` of the unzipped pairs) and measures the update.
While `observe(hook)` is open on a thread, Keras's `BaseOptimizer.apply` (which
`apply_gradients` calls) hands that thread's calls to `hook(optimizer,
grads_and_vars)` instead; the hook's own apply, and any apply on another
thread, runs Keras's method unchanged. Keras is not imported here: with no
Keras loaded there is no Keras optimizer to observe.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any

_current = threading.local()  # .hook: this thread's hook; .inside: the hook is applying
_lock = threading.Lock()
_patched: dict[str, Any] = {}  # "class", "original", "depth" while any observe is open


def _base_class() -> type | None:
    """The Keras 3 class that defines `apply` for every optimizer, if Keras is loaded."""
    keras = sys.modules.get("keras")
    optimizer = getattr(getattr(keras, "optimizers", None), "Optimizer", None)
    if optimizer is None:
        return None
    return next((c for c in optimizer.__mro__ if "apply" in vars(c)), None)


def _observed_apply(optimizer: Any, grads: Any, trainable_variables: Any = None) -> Any:
    hook = getattr(_current, "hook", None)
    original = _patched["original"]
    if hook is None or trainable_variables is None or getattr(_current, "inside", False):
        return original(optimizer, grads, trainable_variables)
    _current.inside = True
    try:
        hook(optimizer, list(zip(grads, trainable_variables)))
    finally:
        _current.inside = False
    return None  # what Keras's `apply` returns


@contextlib.contextmanager
def observe(hook: Callable[[Any, list], Any]) -> Iterator[None]:
    """While open, this thread's Keras optimizer applies go to `hook`."""
    previous = getattr(_current, "hook", None)
    _current.hook = hook
    with _lock:
        if not _patched:
            base = _base_class()
            if base is not None:
                _patched.update({"class": base, "original": base.apply, "depth": 0})
                base.apply = _observed_apply
        if _patched:
            _patched["depth"] += 1
    try:
        yield
    finally:
        _current.hook = previous
        with _lock:
            if _patched:
                _patched["depth"] -= 1
                if _patched["depth"] == 0:
                    _patched["class"].apply = _patched["original"]
                    _patched.clear()
