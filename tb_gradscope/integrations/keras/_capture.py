"""Per-output losses of a compiled Keras model, captured as Keras computes them.

`model.compile(loss={"q": "mse", "aux": "mse"}, loss_weights={"q": 1.0, "aux":
0.2})` gives the model a CompileLoss whose flat list holds one entry per output
(path, loss function, weight, name). While a train step is traced, each entry's
loss function is wrapped so that the tensor Keras computes for that output is
also handed to us; Keras's own graph is unchanged (the wrapper returns the very
same tensor). The recorded loss is the *weighted* one, `weight * loss`, i.e.
exactly the output's term in the total loss Keras differentiates.

Terms a layer adds with `add_loss` while the step is traced (a vector
quantizer's codebook and commitment losses) are captured too, each a loss of
its own after the compiled ones: named after the layer and the local name its
code holds the term under (`vq/commitment_loss`; else `vq/add_loss_<k>`), its
value summed as Keras sums it into the total.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import threading
from collections.abc import Iterator
from typing import Any

import keras
import tensorflow as tf

from tb_gradscope import _tf_private as private


@dataclasses.dataclass(frozen=True)
class OutputLoss:
    """One output's loss as compiled: its name and weight (None means 1)."""

    name: str
    weight: float | None


class Captured:
    """What one traced step computed: the compiled losses and their tensors.

    `losses` lists every compiled output loss (known once the CompileLoss is
    built, which Keras does inside the first traced step); `values` maps an
    index into `losses` to the tensor Keras computed for it.
    """

    def __init__(self, installed: dict | None = None) -> None:
        self._installed = installed if installed is not None else {}
        self.values: dict[int, Any] = {}
        self.added: dict[str, Any] = {}  # the `add_loss` terms traced, in order: name -> value

    @property
    def losses(self) -> list[OutputLoss]:
        """The compiled output losses (the `add_loss` terms are `added`)."""
        return list(self._installed.get("losses", ()))

    def add(self, name: str, value: Any) -> None:
        """An `add_loss` term named `name` (made unique: `_<k>`), valued `value`."""
        taken = {loss.name for loss in self.losses} | set(self.added)
        unique, k = name, 1
        while unique in taken:
            unique, k = f"{name}_{k}", k + 1
        self.added[unique] = tf.reduce_sum(value)  # as Keras sums it into the total


class _Capturing:
    """A loss function that also hands what it returns to this thread's Captured.

    Per thread because `tf.distribute` traces one step per replica, each in its
    own thread and interleaved: each replica must get its own loss tensors.
    """

    def __init__(self, loss_fn: Any, index: int):
        self._loss_fn = loss_fn
        self._index = index

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self._loss_fn(*args, **kwargs)
        captured = getattr(_current, "captured", None)
        if captured is not None:
            captured.values[self._index] = value
        return value

    def __getattr__(self, name: str) -> Any:  # tf_keras reads `.reduction`
        return getattr(self._loss_fn, name)


_current = threading.local()  # .captured: the Captured of the step this thread traces

# Keras 3 keeps its per-output loss functions in its CompileLoss, tf_keras in its
# LossesContainer; both are private (`tb_gradscope/_tf_private.py`).
_KERAS3, _LEGACY = "keras3", "legacy"
_STATE = "_gradscope_capture"  # the container's install state, while any capture is open


def _container(model: Any) -> tuple[Any, str] | None:
    keras3 = private.compile_loss(model)
    if keras3 is not None and private.has_flat_losses(keras3):
        return keras3, _KERAS3
    legacy = model.__dict__.get("compiled_loss") if hasattr(model, "__dict__") else None
    if legacy is not None and private.legacy_is_loss_container(legacy):
        return legacy, _LEGACY
    return None


def _get(container: Any, kind: str) -> list[Any] | None:
    return (
        private.flat_losses(container)
        if kind == _KERAS3
        else private.legacy_loss_functions(container)
    )


def _set(container: Any, kind: str, entries: list[Any] | None) -> None:
    if kind == _KERAS3:
        private.set_flat_losses(container, entries)
    else:
        private.legacy_set_loss_functions(container, entries)


def _output_losses(container: Any, kind: str, flat: list[Any]) -> list[OutputLoss]:
    if kind == _KERAS3:
        return [OutputLoss(str(e.name), _weight(e.loss_weights)) for e in flat]
    names = private.legacy_output_names(container)
    weights = private.legacy_loss_weights(container)
    return [
        OutputLoss(
            str(names[i]) if i < len(names) else f"output_{i}",
            _weight(weights[i]) if i < len(weights) else None,
        )
        for i in range(len(flat))
    ]


def _wrap(container: Any, kind: str, state: dict) -> None:
    """Replaces the container's loss functions with capturing ones."""
    state["flat"] = _get(container, kind)
    flat = list(state["flat"] or [])
    state["losses"] = _output_losses(container, kind, flat)
    if kind == _KERAS3:
        wrapped = [private.with_loss_fn(e, _Capturing(e.loss, i)) for i, e in enumerate(flat)]
    else:
        wrapped = [None if fn is None else _Capturing(fn, i) for i, fn in enumerate(flat)]
    _set(container, kind, wrapped)


def _install(container: Any, kind: str) -> dict:
    """Wraps the container's losses (once, however many captures are open)."""
    state = container.__dict__.setdefault(_STATE, {"depth": 0})
    state["depth"] += 1
    if state["depth"] > 1:
        return state
    built = private.legacy_built(container) if kind == _LEGACY else bool(_get(container, kind))
    if built:
        _wrap(container, kind, state)
    else:
        build = container.build

        def build_then_wrap(*args: Any, **kwargs: Any) -> Any:
            result = build(*args, **kwargs)
            container.__dict__.pop("build", None)
            _wrap(container, kind, state)
            return result

        container.build = build_then_wrap
    return state


def _uninstall(container: Any, kind: str, state: dict) -> None:
    """Gives the container its own losses back when the last capture closes."""
    state["depth"] -= 1
    if state["depth"] > 0:
        return
    container.__dict__.pop("build", None)
    container.__dict__.pop(_STATE, None)
    if "flat" in state:
        _set(container, kind, state["flat"])


_original_add_loss = keras.layers.Layer.add_loss
_add_loss_lock = threading.Lock()
_add_loss_depth = 0


def _observed_add_loss(layer: Any, loss: Any) -> Any:
    result = _original_add_loss(layer, loss)
    captured = getattr(_current, "captured", None)
    if captured is not None:
        values = [v for v in tf.nest.flatten(loss) if tf.is_tensor(v)]
        if values:
            name = _held_as(loss) or f"add_loss_{len(captured.added)}"
            value = values[0] if len(values) == 1 else tf.add_n([tf.reduce_sum(v) for v in values])
            captured.add(f"{layer.name}/{name}", value)
    return result


def _held_as(value: Any) -> str | None:
    """The local name the code calling `add_loss` holds `value` under, or None."""
    frame = inspect.currentframe()
    caller = frame.f_back.f_back if frame is not None and frame.f_back is not None else None
    if caller is None:
        return None
    return next(
        (k for k, v in caller.f_locals.items() if v is value and not k.startswith("_")), None
    )


@contextlib.contextmanager
def _observe_add_loss() -> Iterator[None]:
    """`keras.layers.Layer.add_loss` hands its terms to this thread's Captured while open."""
    global _add_loss_depth
    with _add_loss_lock:
        _add_loss_depth += 1
        keras.layers.Layer.add_loss = _observed_add_loss
    try:
        yield
    finally:
        with _add_loss_lock:
            _add_loss_depth -= 1
            if _add_loss_depth == 0:
                keras.layers.Layer.add_loss = _original_add_loss


@contextlib.contextmanager
def capture_losses(model: Any) -> Iterator[Captured]:
    """While open, Keras's per-output loss tensors (and `add_loss` terms)
    traced by this thread land in the yielded Captured.

    A loss container not built yet is wrapped right after Keras builds it
    (inside the first traced step). It is restored when the last open capture
    closes (replicas of a distributed step overlap), whatever happens.
    """
    found = _container(model)
    if found is None:
        container = kind = state = None
        captured = Captured()
    else:
        container, kind = found
        state = _install(container, kind)
        captured = Captured(state)
    previous = getattr(_current, "captured", None)
    _current.captured = captured
    try:
        with _observe_add_loss():
            yield captured
    finally:
        _current.captured = previous
        if state is not None:
            _uninstall(container, kind, state)


def weighted(model: Any, value: Any, loss: OutputLoss) -> tf.Tensor:
    """`weight * value` in the CompileLoss dtype, as Keras adds it to the total."""
    dtype = getattr(private.compile_loss(model), "dtype", None) or value.dtype
    value = tf.cast(value, dtype)
    return value if loss.weight is None else value * tf.cast(loss.weight, dtype)


def _weight(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
