"""The in-graph stats kernel: gradients and updates -> per-scope tables.

Pure TensorFlow ops, usable eagerly, inside `tf.function` (also XLA) and in TF1
graph mode, so the TF1 integration reuses it. Work is vectorised: a few
reductions per variable give a [n_vars, k] matrix, which one gather and one
segment reduction roll up to every scope of the tree (O(variables x depth)),
with no host round trip.

A gradient is summarised as the dense gradient it stands for: an
`tf.IndexedSlices` has its duplicate indices summed first and its untouched rows
counted as exact zeros, so every stat equals that of `tf.convert_to_tensor(g)`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import control_flow_util  # XLA context: no public API

from tb_gradscope.format.metadata import KIND_SPECS, Kind
from tb_gradscope.scopes import ScopeLayout

GRAD_COLUMNS = KIND_SPECS[Kind.GRAD_STATS].columns
UPDATE_COLUMNS = KIND_SPECS[Kind.UPDATE_STATS].columns

# Columns of the per-variable gradient matrix.
_PRESENT, _SUMSQ, _MAX_ABS, _NONFINITE, _ZEROS, _COUNT = range(6)
_N_VAR_GRAD = 6


@dataclasses.dataclass(frozen=True)
class RollUp:
    """Which variables each scope holds, as (scope, variable) membership pairs."""

    n_scopes: int
    n_variables: int
    pair_scope: np.ndarray  # int32 [n_pairs]
    pair_variable: np.ndarray  # int32 [n_pairs]

    @classmethod
    def from_layout(cls, layout: ScopeLayout) -> "RollUp":
        scope_ids = [s for s, members in enumerate(layout.members) for _ in members]
        var_ids = [v for members in layout.members for v in members]
        return cls(
            n_scopes=len(layout.scopes),
            n_variables=len(layout.variable_names),
            pair_scope=np.asarray(scope_ids, dtype=np.int32),
            pair_variable=np.asarray(var_ids, dtype=np.int32),
        )

    def sum(self, per_variable: tf.Tensor) -> tf.Tensor:
        """[n_vars, k] -> [n_scopes, k]: sums over each scope's variables."""
        rows = tf.gather(per_variable, self.pair_variable)
        return tf.math.unsorted_segment_sum(rows, self.pair_scope, self.n_scopes)

    def max(self, per_variable: tf.Tensor) -> tf.Tensor:
        """[n_vars] -> [n_scopes]: max over each scope's variables."""
        rows = tf.gather(per_variable, self.pair_variable)
        return tf.math.unsorted_segment_max(rows, self.pair_scope, self.n_scopes)


def _float_values(values: tf.Tensor) -> tf.Tensor:
    """Flat values in a float type wide enough to sum squares (f16/bf16 -> f32)."""
    flat = tf.reshape(values, [-1])
    return flat if flat.dtype in (tf.float32, tf.float64) else tf.cast(flat, tf.float32)


def _dense_values(grad: Any) -> tuple[tf.Tensor, tf.Tensor]:
    """(flat values that are not implicit zeros, element count of the dense gradient)."""
    if isinstance(grad, tf.IndexedSlices):
        unique, position = tf.unique(grad.indices)
        summed = tf.math.unsorted_segment_sum(grad.values, position, tf.size(unique))
        values = _float_values(summed)
        if grad.dense_shape is not None:
            total = tf.reduce_prod(tf.cast(grad.dense_shape, tf.int64))
        else:
            row = tf.reduce_prod(tf.cast(tf.shape(grad.values)[1:], tf.int64))
            total = tf.cast(tf.size(unique), tf.int64) * row
        return values, total
    values = _float_values(tf.convert_to_tensor(grad))
    return values, tf.size(values, out_type=tf.int64)


# Above this many elements a float32 count of nonzeros may be inexact.
_FLOAT_COUNT_LIMIT = 2**24


def _fast_stats(values: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(max |v|, non-finite count, nonzero count) when every element is finite.

    Fused reductions without temporaries where TF has them: max |v| from
    max and min; nonzeros summed in float32 (exact below 2**24 elements).
    """
    max_abs = tf.maximum(tf.reduce_max(values), -tf.reduce_min(values))
    if values.shape.num_elements() is not None and values.shape.num_elements() < _FLOAT_COUNT_LIMIT:
        # A comparison, not sign(|v|): TF flushes denormals to zero in arithmetic.
        nonzero = tf.cast(tf.reduce_sum(tf.cast(tf.not_equal(values, 0), tf.float32)), tf.int64)
    else:
        nonzero = tf.math.count_nonzero(values, dtype=tf.int64)
    return max_abs, tf.constant(0, tf.int64), nonzero


def _slow_stats(values: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    """(max |v| over finite elements, non-finite count, nonzero count)."""
    finite = tf.math.is_finite(values)
    max_abs = tf.reduce_max(tf.where(finite, tf.abs(values), tf.zeros_like(values)))
    nonfinite = tf.size(values, out_type=tf.int64) - tf.math.count_nonzero(finite, dtype=tf.int64)
    return max_abs, nonfinite, tf.math.count_nonzero(values, dtype=tf.int64)


def _sum_of_squares(values: tf.Tensor) -> tf.Tensor:
    """sum(v**2): the fused euclidean-norm kernel (one pass, no temporary) where
    it exists; XLA has no EuclideanNorm kernel but fuses square+sum itself."""
    if in_xla():
        return tf.reduce_sum(tf.square(values))
    return tf.square(tf.math.reduce_euclidean_norm(values))


def in_xla() -> bool:
    """True while tracing inside an XLA-compiled function (jit_compile=True)."""
    if tf.executing_eagerly():
        return False
    graph = tf.compat.v1.get_default_graph()
    return control_flow_util.GraphOrParentsInXlaContext(graph)


def _one_grad_stats(grad: Any) -> tf.Tensor:
    values, total = _dense_values(grad)
    sumsq = _sum_of_squares(values)
    # A finite sum of squares means every element is finite: take the fast path.
    max_abs, nonfinite, nonzero = tf.cond(
        tf.math.is_finite(sumsq), lambda: _fast_stats(values), lambda: _slow_stats(values)
    )
    max_abs = tf.maximum(max_abs, 0)  # reduce_max of no elements is -inf
    zeros = total - nonzero  # implicit zeros of IndexedSlices included
    return tf.stack(
        [
            tf.constant(1.0, tf.float64),
            tf.cast(sumsq, tf.float64),
            tf.cast(max_abs, tf.float64),
            tf.cast(nonfinite, tf.float64),
            tf.cast(zeros, tf.float64),
            tf.cast(total, tf.float64),
        ]
    )


def variable_grad_stats(grads: Sequence[Any]) -> tf.Tensor:
    """Per gradient: [present, sum of squares, max |g|, non-finite, zeros, elements].

    `None` (no gradient) gives a row of zeros with present = 0. max |g| is taken
    over finite elements; NaN/Inf are counted in the non-finite column and make
    the sum of squares non-finite. Subnormal values count as zeros, as TF's CPU
    kernels flush them. Returns float64 [len(grads), 6].
    """
    rows = [
        tf.zeros([_N_VAR_GRAD], tf.float64) if grad is None else _one_grad_stats(grad)
        for grad in grads
    ]
    if not rows:
        return tf.zeros([0, _N_VAR_GRAD], tf.float64)
    return tf.stack(rows)


def grad_table(grads: Sequence[Any], rollup: RollUp) -> tf.Tensor:
    """The GRAD_STATS table [n_scopes, len(GRAD_COLUMNS)] (float32) of one loss.

    `grads` is index-aligned with the layout's variables (None where the loss
    gives no gradient). Columns: grad_vars, l2, max_abs, nonfinite, zero_frac.
    """
    if len(grads) != rollup.n_variables:
        raise ValueError(
            f"grad_table got {len(grads)} gradients for a layout of "
            f"{rollup.n_variables} variables; align them with layout.variable_names"
        )
    per_var = variable_grad_stats(grads)
    sums = rollup.sum(per_var)
    counts = sums[:, _COUNT]
    zero_frac = tf.math.divide_no_nan(sums[:, _ZEROS], counts)
    table = tf.stack(
        [
            sums[:, _PRESENT],
            tf.sqrt(sums[:, _SUMSQ]),
            rollup.max(per_var[:, _MAX_ABS]),
            sums[:, _NONFINITE],
            zero_frac,
        ],
        axis=1,
    )
    return tf.cast(table, tf.float32)


def snapshot(variables: Sequence[Any]) -> list[tf.Tensor]:
    """Values of variables, read now (a transient copy for ||delta theta||)."""
    return [tf.identity(tf.convert_to_tensor(v)) for v in variables]


def update_table(
    before: Sequence[tf.Tensor | None], variables: Sequence[Any], rollup: RollUp
) -> tf.Tensor:
    """The UPDATE_STATS table [n_scopes, 2] (float32): ||after - before||, ||after||.

    The variables are read when this runs; call it after the optimizer step.
    A None in `before` marks a variable the step could not write (not handed to
    the optimizer): its update is 0 by construction, and it is not copied.
    """
    rows = []
    for old, variable in zip(before, variables):
        new = tf.convert_to_tensor(variable)
        step = 0.0 if old is None else _sum_of_squares(_float_values(new - old))
        rows.append(
            tf.stack(
                [
                    tf.cast(step, tf.float64),
                    tf.cast(_sum_of_squares(_float_values(new)), tf.float64),
                ]
            )
        )
    per_var = tf.stack(rows) if rows else tf.zeros([0, 2], tf.float64)
    return tf.cast(tf.sqrt(rollup.sum(per_var)), tf.float32)
