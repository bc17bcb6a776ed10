"""Mixed precision: unscaled gradient norms, and steps the loss scaler skipped.

With `mixed_float16`, Keras's LossScaleOptimizer multiplies the loss by a
dynamic scale before it is differentiated (`optimizer.scale_loss`), divides the
gradients by it when applying, and skips the update when any gradient is not
finite (then halves the scale). So the gradients a recorder sees carry the
scale: recorded norms are divided by it (the scale is a power of two, so this
is exact), and a step whose gradients overflowed is recorded as a skipped step
(a SKIPPED event), not as a step with infinite norms.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.core.loss_scale import OVERFLOW as OVERFLOW  # re-exported
from tb_gradscope.core.loss_scale import SKIPPED_RECORD as SKIPPED_RECORD  # re-exported
from tb_gradscope.core.loss_scale import skipped_event as skipped_event  # re-exported
from tb_gradscope.core.warn import warn_once
from tb_gradscope.format.metadata import KIND_SPECS, Kind
from tb_gradscope.format.records import encode_json
from tb_gradscope.record import _tables as tables_lib
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._writing import graph_key

_GRAD_COLUMNS = KIND_SPECS[Kind.GRAD_STATS].columns
# GRAD_STATS columns that scale with the gradient (norm and max |g|).
_SCALED = np.asarray([c in ("l2", "max_abs") for c in _GRAD_COLUMNS])
_NONFINITE = _GRAD_COLUMNS.index("nonfinite")


def is_loss_scale_optimizer(optimizer: Any) -> bool:
    """A Keras 3 or tf_keras LossScaleOptimizer."""
    keras3 = hasattr(optimizer, "scale_loss") and hasattr(optimizer, "initial_scale")
    legacy = hasattr(optimizer, "get_scaled_loss") and hasattr(optimizer, "loss_scale")
    return keras3 or legacy


def check_loss_scale(loss_scale: Any) -> None:
    """`Recorder(loss_scale=...)` is None or a LossScaleOptimizer."""
    if loss_scale is not None and not is_loss_scale_optimizer(loss_scale):
        raise ValueError(
            f"loss_scale must be the LossScaleOptimizer whose scale_loss scales the "
            f"recorded losses, got {type(loss_scale).__name__}"
        )


def warn_if_unscaled(optimizer: Any, key: Any, recorder: str) -> None:
    """Warns once (under `key`) when a recorder not given `loss_scale` applies
    through a LossScaleOptimizer."""
    if is_loss_scale_optimizer(optimizer):
        warn_once(
            key,
            f"Recorder '{recorder}' applies through a LossScaleOptimizer but was "
            "not given loss_scale: recorded norms are of the scaled gradients and "
            "skipped steps are not marked; pass Recorder(loss_scale=optimizer)",
        )


def current_scale(optimizer: Any) -> tf.Tensor:
    """The scale `optimizer` multiplies the loss by in the step being traced.

    Keras 3 reads it as `scale_loss` does: the dynamic scale once the optimizer
    is built, its initial scale before (a custom loop traced before the first
    apply scales by the initial value). tf_keras: `loss_scale`.
    """
    if hasattr(optimizer, "get_scaled_loss"):
        return tf.cast(optimizer.loss_scale, tf.float32)
    if getattr(optimizer, "built", False):
        return tf.cast(tf.convert_to_tensor(optimizer.dynamic_scale), tf.float32)
    return tf.constant(float(optimizer.initial_scale), tf.float32)


def unscaled(table: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    """A GRAD_STATS table of scaled gradients, as the unscaled gradients' table."""
    return tf.where(tf.constant(_SCALED), table / tf.cast(scale, table.dtype), table)


def overflowed(tables: list[tf.Tensor]) -> tf.Tensor:
    """True when any GRAD_STATS table counts a non-finite gradient value."""
    if not tables:
        return tf.constant(False)
    return tf.reduce_any(tf.stack([tf.reduce_sum(t[:, _NONFINITE]) > 0 for t in tables]))


def record_scaled_losses(
    state: Any,
    step: tf.Variable,
    makers: Mapping[str, Callable[[], list]],
    scale: tf.Tensor,
    ctx: ExecutionContext,
) -> None:
    """A Recorder's loss tables for gradients scaled by `scale` (read before the apply).

    In the recorded-step branch: the GRAD_STATS tables are unscaled, and when
    any counts a non-finite value the step's tables are not written: a SKIPPED
    event is, instead (CONFLICT cosines do not depend on the scale). Rules see
    the unscaled tables.
    """
    now, record = state.now(step, ctx)
    layout, rollup = state.layout.vlayout.layout, state.layout.rollup

    def write(found: list) -> tf.Tensor:
        tables = [
            dataclasses.replace(t, value=unscaled(t.value, scale))
            if t.kind == Kind.GRAD_STATS
            else t
            for t in found
        ]
        rows = [(t.kind, t.name, t.scopes, t.attrs, t.value) for t in tables]
        over = overflowed([t.value for t in tables if t.kind == Kind.GRAD_STATS])
        return tf.cond(
            over,
            lambda: _write_skipped(state.emitter, now, scale),
            lambda: state.emitter.write_due(now, rows),
        )

    def make_aligned():
        return {name: make() for name, make in makers.items()}

    found = tables_lib.recorded_tables(
        record,
        make_aligned,
        layout,
        rollup,
        state.conflict,
        write,
        kernels=state.kernels,
        columns=state.grad_columns,
        ctx=ctx,
    )[0]
    if state.checks is not None:
        grads = {t.name: unscaled(t.value, scale) for t in found if t.kind == Kind.GRAD_STATS}
        state.pending_tables.setdefault(graph_key(ctx), {}).update(grads)


def _write_skipped(emitter: Any, step: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
    """Writes the SKIPPED event of `step` (built on the host: overflow steps only)."""

    def host(step_value: Any, scale_value: Any) -> Any:
        return encode_json(skipped_event(int(step_value), float(scale_value)).to_json())

    blob = tf.py_function(host, [step, scale], tf.string)
    tag, meta = emitter.metadata(Kind.EVENTS, SKIPPED_RECORD, ())
    return emitter.sink.write(tag, meta, tf.reshape(blob, [1]), step, tf.constant(True))
