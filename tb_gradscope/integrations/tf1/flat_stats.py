"""Stats kernels with a constant number of ops, for large TF1 graphs.

`record.stats` builds a handful of ops per variable; building a TF1 graph costs
roughly 0.1-1 ms per op in Python, which made a 400-variable recorder take half
a minute to construct. Here every variable contributes one reshape (and a cast
when needed) to a single flat vector; sorted segment reductions over that
vector (one 1-D column at a time, the fast CPU kernel) give the same
per-variable sums, rolled up by `record.stats.RollUp` into the same tables
(`grad_table`'s columns and semantics, cross-checked in the tests).
`tf.IndexedSlices` gradients are converted to their dense equivalent.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS
from tb_gradscope.record.stats import RollUp


def flat_dtype(tensors: Sequence[Any]) -> tf.DType:
    """float64 if any input is float64, else float32 (f16/bf16 sum in f32)."""
    return tf.float64 if any(t.dtype == tf.float64 for t in tensors) else tf.float32


def flatten(tensors: Sequence[Any], dtype: tf.DType) -> tf.Tensor:
    """All values as one flat vector of `dtype`, in order."""
    parts = []
    for t in tensors:
        flat = tf.reshape(tf.convert_to_tensor(t), [-1])
        parts.append(flat if flat.dtype == dtype else tf.cast(flat, dtype))
    return tf.concat(parts, 0) if len(parts) > 1 else parts[0]


def segment_ids(tensors: Sequence[Any]) -> tf.Tensor:
    """For each element of `flatten(tensors)`, the index of its tensor."""
    shapes = [tf.TensorShape(t.shape) for t in tensors]
    if all(s.is_fully_defined() for s in shapes):
        sizes = [s.num_elements() for s in shapes]
        return tf.constant(np.repeat(np.arange(len(sizes), dtype=np.int32), sizes))
    sizes = tf.stack([tf.size(t, out_type=tf.int32) for t in tensors])
    return tf.repeat(tf.range(len(tensors), dtype=tf.int32), sizes)


def _segment_sum(values: tf.Tensor, ids: tf.Tensor, n: int, pad: bool = True) -> tf.Tensor:
    """Sums over the sorted segments `ids` (0..n-1), as float64 [n].

    One column at a time: the sorted kernel over a 1-D vector is several times
    faster on CPU than unsorted_segment_sum over stacked columns.
    """
    sums = tf.cast(tf.math.segment_sum(values, ids), tf.float64)
    return _pad_to(sums, n) if pad else sums


def _pad_to(per_segment: tf.Tensor, n: int) -> tf.Tensor:
    """Rows for trailing empty segments (zero-size variables), which segment ops omit."""
    return tf.pad(per_segment, [[0, n - tf.shape(per_segment)[0]]])


def may_be_empty(tensors: Sequence[Any]) -> bool:
    """Whether a tensor may have no elements (then its segment is missing and
    the sums need padding); False when every shape is known and non-empty,
    which saves each sum the five ops of a pad."""
    shapes = [tf.TensorShape(t.shape) for t in tensors]
    return not all(s.is_fully_defined() and s.num_elements() > 0 for s in shapes)


def _sizes(tensors: Sequence[Any]) -> tf.Tensor:
    shapes = [tf.TensorShape(t.shape) for t in tensors]
    if all(s.is_fully_defined() for s in shapes):
        return tf.constant([float(s.num_elements()) for s in shapes], tf.float64)
    return tf.cast(tf.stack([tf.size(t) for t in tensors]), tf.float64)


def grad_table(
    grads: Sequence[Any], rollup: RollUp, columns: Collection[str] = OPTIONAL_GRAD_COLUMNS
) -> tf.Tensor:
    """The GRAD_STATS table [n_scopes, 5] (float32) of one loss, as record.stats'.

    `grads` is index-aligned with the layout's variables, None where the loss
    gives no gradient. An optional column ("max_abs", "zero_frac") left out
    of `columns` is not computed and reads NaN, "not recorded".
    """
    present = [i for i, g in enumerate(grads) if g is not None]
    n = rollup.n_variables
    if present:
        dense = [tf.convert_to_tensor(grads[i]) for i in present]
        values = flatten(dense, flat_dtype(dense))
        ids = segment_ids(dense)
        k = len(present)
        pad = may_be_empty(dense)
        finite = tf.math.is_finite(values)
        not_recorded = np.full([k], np.nan)
        max_abs = not_recorded
        if "max_abs" in columns:
            abs_finite = tf.where(
                finite, tf.abs(values), tf.constant(0, values.dtype)
            )  # no zeros pass
            max_abs = tf.cast(tf.math.segment_max(abs_finite, ids), tf.float64)
            if pad:  # empty segments hold the lowest float
                max_abs = tf.maximum(_pad_to(max_abs, k), 0)
        zeros = not_recorded
        if "zero_frac" in columns:
            zeros = _segment_sum(tf.cast(tf.equal(values, 0), values.dtype), ids, k, pad)
        per_column = [
            tf.ones([k], tf.float64),
            _segment_sum(tf.square(values), ids, k, pad),
            max_abs,
            _segment_sum(tf.cast(tf.logical_not(finite), values.dtype), ids, k, pad),
            zeros,
            _sizes(dense),
        ]  # present, sumsq, max_abs, nonfinite, zeros, count
        rows = tf.stack(per_column, axis=1)
        per_var = (
            rows  # every variable has a gradient: the scatter would copy the rows
            if k == n
            else tf.scatter_nd(np.asarray(present, np.int32)[:, None], rows, [n, 6])
        )
    else:
        per_var = tf.zeros([n, 6], tf.float64)
    # Columns by one Unpack each, not six strided slices (each with three
    # constant inputs): a table is fetched in the user's own call.
    sums = tf.unstack(rollup.sum(per_var), num=6, axis=1)
    scope_nan = np.full([rollup.n_scopes], np.nan)
    table = tf.stack(
        [
            sums[0],
            tf.sqrt(sums[1]),
            rollup.max(tf.unstack(per_var, num=6, axis=1)[2])
            if "max_abs" in columns
            else scope_nan,
            sums[3],
            tf.math.divide_no_nan(sums[4], sums[5]) if "zero_frac" in columns else scope_nan,
        ],
        axis=1,
    )
    return tf.cast(table, tf.float32)


def update_sums(
    now: tf.Tensor, before: tf.Tensor, ids: tf.Tensor, n: int, pad: bool = True
) -> tf.Tensor:
    """Per variable [n, 2] float64: sum of (now - before)^2 and of now^2
    (`pad`: some variable may be empty, see `may_be_empty`)."""
    return tf.stack(
        [
            _segment_sum(tf.square(now - before), ids, n, pad),
            _segment_sum(tf.square(now), ids, n, pad),
        ],
        axis=1,
    )


def delta_sums(
    delta: tf.Tensor, now: tf.Tensor, ids: tf.Tensor, n: int, pad: bool = True
) -> tf.Tensor:
    """`update_sums` from the change itself: per variable [n, 2] float64, sum
    of delta^2 and of now^2 (a window's update summed over its calls)."""
    return tf.stack(
        [_segment_sum(tf.square(delta), ids, n, pad), _segment_sum(tf.square(now), ids, n, pad)],
        axis=1,
    )


def changed_counts(
    now: tf.Tensor, before: tf.Tensor, ids: tf.Tensor, n: int, pad: bool = True
) -> tf.Tensor:
    """Per variable [n] float64: how many elements differ (NaN counts as changed)."""
    return _segment_sum(tf.cast(tf.not_equal(now, before), now.dtype), ids, n, pad)


def update_table(per_var: tf.Tensor, rollup: RollUp) -> tf.Tensor:
    """The UPDATE_STATS table [n_scopes, 2] (float32) from `update_sums`."""
    return tf.cast(tf.sqrt(rollup.sum(per_var)), tf.float32)
