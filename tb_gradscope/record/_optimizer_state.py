"""A Keras 3 optimizer's state, built outside the traced step that first applies it.

Keras builds an optimizer's slots (Adam's moments) in its first
`apply_gradients`. Traced inside a `tf.function` whose step also records
(`Recorder.analyze` on an eager loop, a step whose apply follows the recording
branches), the slots' initializers can pick up the step's control dependencies
and fail to lift out of the function (`UnliftableError`), leaving the optimizer
half-built for the real step. Building it first, eagerly, with the very
variables and name scope its first apply would use, gives the same state.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope.record._context import ExecutionContext


def build_outside_trace(optimizer: Any, variables: Sequence[Any], ctx: ExecutionContext) -> None:
    """Builds an unbuilt Keras 3 optimizer for `variables` outside the current trace."""
    if ctx.eager or getattr(optimizer, "built", True) or not variables:
        return
    if not type(optimizer).__module__.startswith("keras.") or not hasattr(optimizer, "build"):
        return  # tf_keras and other optimizers build their state their own way
    import keras  # only here: Keras 3 is there, its optimizer is in hand

    with tf.init_scope():
        with keras.name_scope(
            optimizer.name, caller=optimizer
        ):  # keras.src.backend.name_scope itself
            optimizer.build(list(variables))
        optimizer.built = True
