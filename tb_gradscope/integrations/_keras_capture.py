"""Per-output losses of a compiled Keras model, captured as Keras computes them.

`model.compile(loss={"q": "mse", "aux": "mse"}, loss_weights={"q": 1.0, "aux":
0.2})` gives the model a CompileLoss whose flat list holds one entry per output
(path, loss function, weight, name). While a train step is traced, each entry's
loss function is wrapped so that the tensor Keras computes for that output is
also handed to us; Keras's own graph is unchanged (the wrapper returns the very
same tensor). The recorded loss is the *weighted* one, `weight * loss`, i.e.
exactly the output's term in the total loss Keras differentiates.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Iterator

import tensorflow as tf


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

    def __init__(self) -> None:
        self.losses: list[OutputLoss] = []
        self.values: dict[int, Any] = {}

    def wrap(self, container: Any, attr: str, flat: list[Any]) -> list[Any]:
        """`flat` (the container's loss list) with every loss function capturing."""
        if attr == _KERAS3:
            self.losses = [OutputLoss(str(e.name), _weight(e.loss_weights)) for e in flat]
            return [e._replace(loss=_Capturing(e.loss, i, self.values)) for i, e in enumerate(flat)]
        names = list(getattr(container, "_output_names", None) or [])
        weights = list(getattr(container, "_loss_weights", None) or [])
        self.losses = [
            OutputLoss(
                str(names[i]) if i < len(names) else f"output_{i}",
                _weight(weights[i]) if i < len(weights) else None,
            )
            for i in range(len(flat))
        ]
        return [None if fn is None else _Capturing(fn, i, self.values) for i, fn in enumerate(flat)]


class _Capturing:
    """A loss function that also stores what it returns."""

    def __init__(self, loss_fn: Any, index: int, sink: dict[int, Any]):
        self._loss_fn = loss_fn
        self._index = index
        self._sink = sink

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        value = self._loss_fn(*args, **kwargs)
        self._sink[self._index] = value
        return value

    def __getattr__(self, name: str) -> Any:  # tf_keras reads `.reduction`
        return getattr(self._loss_fn, name)


# Where each Keras keeps its per-output loss functions once built:
# Keras 3 `model._compile_loss._flat_losses` (entries with .loss/.loss_weights/.name),
# tf_keras `model.compiled_loss._losses` (loss objects, aligned with
# `_output_names` and `_loss_weights`).
_KERAS3, _LEGACY = "_flat_losses", "_losses"


def _container(model: Any) -> tuple[Any, str] | None:
    keras3 = getattr(model, "_compile_loss", None)
    if keras3 is not None and hasattr(keras3, _KERAS3):
        return keras3, _KERAS3
    legacy = model.__dict__.get("compiled_loss") if hasattr(model, "__dict__") else None
    if legacy is not None and hasattr(legacy, _LEGACY) and hasattr(legacy, "_built"):
        return legacy, _LEGACY
    return None


@contextlib.contextmanager
def capture_losses(model: Any) -> Iterator[Captured]:
    """While open, Keras's per-output loss tensors land in the yielded Captured.

    A loss container not built yet is wrapped right after Keras builds it
    (inside the first traced step). It is restored on exit, whatever happens.
    """
    captured = Captured()
    found = _container(model)
    if found is None:
        yield captured
        return
    container, attr = found
    original: dict[str, Any] = {}
    built = container._built if attr == _LEGACY else bool(getattr(container, attr, None))
    if built:
        original["flat"] = getattr(container, attr)
        setattr(container, attr, captured.wrap(container, attr, original["flat"]))
    else:
        build = container.build

        def build_then_wrap(*args: Any, **kwargs: Any) -> Any:
            result = build(*args, **kwargs)
            original["flat"] = getattr(container, attr)
            setattr(container, attr, captured.wrap(container, attr, original["flat"] or []))
            return result

        container.build = build_then_wrap
    try:
        yield captured
    finally:
        container.__dict__.pop("build", None)
        if "flat" in original:
            setattr(container, attr, original["flat"])


def weighted(model: Any, value: Any, loss: OutputLoss) -> tf.Tensor:
    """`weight * value` in the CompileLoss dtype, as Keras adds it to the total."""
    dtype = getattr(getattr(model, "_compile_loss", None), "dtype", None) or value.dtype
    value = tf.cast(value, dtype)
    return value if loss.weight is None else value * tf.cast(loss.weight, dtype)


def _weight(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
