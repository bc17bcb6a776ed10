"""Per-output losses of a compiled Keras 3 model, captured as Keras computes them.

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

    def wrap(self, flat: list[Any]) -> list[Any]:
        self.losses = [OutputLoss(str(e.name), _weight(e.loss_weights)) for e in flat]
        return [entry._replace(loss=_Capturing(entry.loss, i, self.values)) for i, entry in enumerate(flat)]


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


@contextlib.contextmanager
def capture_losses(model: Any) -> Iterator[Captured]:
    """While open, Keras's per-output loss tensors land in the yielded Captured.

    A CompileLoss not built yet is wrapped right after Keras builds it. The
    CompileLoss is restored on exit, whatever happens inside.
    """
    captured = Captured()
    compile_loss = getattr(model, "_compile_loss", None)
    if compile_loss is None:
        yield captured
        return
    original: dict[str, Any] = {}
    if getattr(compile_loss, "_flat_losses", None):
        original["flat"] = compile_loss._flat_losses
        compile_loss._flat_losses = captured.wrap(original["flat"])
    else:
        build = compile_loss.build

        def build_then_wrap(*args: Any, **kwargs: Any) -> Any:
            result = build(*args, **kwargs)
            original["flat"] = compile_loss._flat_losses
            compile_loss._flat_losses = captured.wrap(original["flat"] or [])
            return result

        compile_loss.build = build_then_wrap
    try:
        yield captured
    finally:
        compile_loss.__dict__.pop("build", None)
        if "flat" in original:
            compile_loss._flat_losses = original["flat"]


def weighted(model: Any, value: Any, loss: OutputLoss) -> tf.Tensor:
    """`weight * value` in the CompileLoss dtype, as Keras adds it to the total."""
    dtype = getattr(getattr(model, "_compile_loss", None), "dtype", None) or tf.float32
    value = tf.cast(value, dtype)
    return value if loss.weight is None else value * tf.cast(loss.weight, dtype)


def _weight(value: Any) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
