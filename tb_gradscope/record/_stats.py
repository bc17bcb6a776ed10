"""The statistics kernel: gradients and values before/after -> per-scope tables.

The one kernel of every way of recording: the TF2 `Recorder`, the Keras
callback and the TF1 `GraphRecorder` all build their GRAD_STATS and
UPDATE_STATS tables here. It takes tensors and knows nothing of how they were
obtained: pure TensorFlow ops, usable eagerly, inside `tf.function` (also
XLA, whose kernels may round differently) and in a TF1 graph run by a
Session; eager, `tf.function` and Session give bitwise the same tables
(tested). Per variable only its flattening remains (a reshape, a cast where
its dtype differs): tensors are joined once into `reductions.Segments` and
reduced by a constant number of segment ops (tensors of 65 536 elements or
more alone, by fused kernels: `reductions.TensorGroup`), giving a [n_vars, k]
matrix that one gather and one segment reduction roll up to every scope
(`RollUp`), with no host round trip. `update_sums` is the flat form for
callers that keep the values before the step as one flat tensor (TF1's
snapshot variable).

A gradient is summarised as the dense gradient it stands for: an
`tf.IndexedSlices` has its duplicate indices summed first and its untouched rows
counted as exact zeros, so every stat equals that of `tf.convert_to_tensor(g)`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.format.metadata import KIND_SPECS, OPTIONAL_GRAD_COLUMNS, Kind
from tb_gradscope.record._op_scope import kernel
from tb_gradscope.record._reductions import BIG, Segments, TensorGroup, concat, is_big, stack
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
    def from_layout(cls, layout: ScopeLayout) -> RollUp:
        scope_ids = [s for s, members in enumerate(layout.members) for _ in members]
        var_ids = [v for members in layout.members for v in members]
        return cls(
            n_scopes=len(layout.scopes),
            n_variables=len(layout.variable_names),
            pair_scope=np.asarray(scope_ids, dtype=np.int32),
            pair_variable=np.asarray(var_ids, dtype=np.int32),
        )

    @classmethod
    def concatenate(cls, parts: Sequence[RollUp]) -> RollUp:
        """Roll-ups side by side: each part's variables and scopes after the previous parts'."""
        if len(parts) == 1:
            return parts[0]
        scope_offsets = np.cumsum([0] + [p.n_scopes for p in parts])
        variable_offsets = np.cumsum([0] + [p.n_variables for p in parts])
        return cls(
            n_scopes=int(scope_offsets[-1]),
            n_variables=int(variable_offsets[-1]),
            pair_scope=np.concatenate(
                [p.pair_scope + s for p, s in zip(parts, scope_offsets)]
            ).astype(np.int32),
            pair_variable=np.concatenate(
                [p.pair_variable + v for p, v in zip(parts, variable_offsets)]
            ).astype(np.int32),
        )

    def sum(self, per_variable: tf.Tensor) -> tf.Tensor:
        """[n_vars, k] -> [n_scopes, k]: sums over each scope's variables."""
        rows = tf.gather(per_variable, self.pair_variable)
        return tf.math.unsorted_segment_sum(rows, self.pair_scope, self.n_scopes)

    def max(self, per_variable: tf.Tensor) -> tf.Tensor:
        """[n_vars] -> [n_scopes]: max over each scope's variables."""
        rows = tf.gather(per_variable, self.pair_variable)
        return tf.math.unsorted_segment_max(rows, self.pair_scope, self.n_scopes)


def _float_values(values: tf.Tensor, minus_one: tf.Tensor | None = None) -> tf.Tensor:
    """Flat values in a float type wide enough to sum squares (f16/bf16 -> f32).

    A rank-1 tensor is taken as it is; others are reshaped by `minus_one` when
    given (one shape constant shared by many reshapes: one op per tensor, not two).
    """
    flat = (
        values
        if values.shape.rank == 1
        else tf.reshape(values, [-1] if minus_one is None else minus_one)
    )
    return flat if flat.dtype in (tf.float32, tf.float64) else tf.cast(flat, tf.float32)


def float_values(tensors: Sequence[tf.Tensor]) -> list[tf.Tensor]:
    """`_float_values` of many tensors, sharing one reshape shape constant."""
    minus_one = tf.constant([-1]) if any(t.shape.rank != 1 for t in tensors) else None
    return [_float_values(t, minus_one) for t in tensors]


def _dense_values(
    grad: Any, minus_one: tf.Tensor | None = None
) -> tuple[tf.Tensor, tf.Tensor | int]:
    """(flat values that are not implicit zeros, element count of the dense gradient).

    The count is a Python int when known statically (one constant for all).
    """
    if isinstance(grad, tf.IndexedSlices):
        unique, position = tf.unique(grad.indices)
        summed = tf.math.unsorted_segment_sum(grad.values, position, tf.size(unique))
        values = _float_values(summed, minus_one)
        if grad.dense_shape is not None:
            total = tf.reduce_prod(tf.cast(grad.dense_shape, tf.int64))
        else:
            row = tf.reduce_prod(tf.cast(tf.shape(grad.values)[1:], tf.int64))
            total = tf.cast(tf.size(unique), tf.int64) * row
        return values, total
    values = _float_values(tf.convert_to_tensor(grad), minus_one)
    size = values.shape.num_elements()
    return values, size if size is not None else tf.size(values, out_type=tf.int64)


@kernel("grad_stats")
def variable_grad_stats(
    grads: Sequence[Any], columns: Collection[str] = OPTIONAL_GRAD_COLUMNS
) -> tf.Tensor:
    """Per gradient: [present, sum of squares, max |g|, non-finite, zeros, elements].

    `None` (no gradient) gives a row of zeros with present = 0. max |g| is taken
    over finite elements; NaN/Inf are counted in the non-finite column and make
    the sum of squares non-finite. Subnormal values count as zeros, as TF's CPU
    kernels flush them. An optional column left out of `columns` ("max_abs",
    "zero_frac": the zeros) is not computed and reads NaN. Returns float64
    [len(grads), 6]. One tf.cond for all gradients: a finite total sum of
    squares means every element is finite, and the NaN/Inf passes are skipped
    (not for fewer than BIG elements in all: there the passes cost less than
    the cond).
    """
    present = [i for i, g in enumerate(grads) if g is not None]
    if not present:
        return tf.zeros([len(grads), _N_VAR_GRAD], tf.float64)
    minus_one = tf.constant([-1])
    dense = [_dense_values(grads[i], minus_one) for i in present]
    group = TensorGroup([values for values, _ in dense])
    counts = [total for _, total in dense]
    if all(isinstance(c, int) for c in counts):
        totals = tf.constant(np.asarray(counts, np.float64))
    else:
        totals = stack([tf.cast(c, tf.float64) for c in counts])
    sumsq = group.sum_of_squares()
    wanted = {"max_abs": "max_abs" in columns, "nonzero": "zero_frac" in columns}
    if group.elements is not None and group.elements < BIG:
        # A few elements: the NaN/Inf passes cost less than the cond's switches,
        # merges and untaken branch (~30 ops); the values are the same.
        found = group.any_stats(**wanted)
    else:
        found = tf.cond(
            tf.math.is_finite(tf.reduce_sum(sumsq)),
            lambda: group.finite_stats(**wanted),
            lambda: group.any_stats(**wanted),
        )
    not_recorded = None if all(wanted.values()) else tf.constant(np.full([len(present)], np.nan))
    rows = tf.stack(
        [
            tf.ones([len(present)], tf.float64),
            sumsq,
            found["max_abs"] if "max_abs" in found else not_recorded,
            found["nonfinite"],
            totals - found["nonzero"] if "nonzero" in found else not_recorded,
            totals,
        ],
        axis=1,
    )
    if len(present) == len(grads):
        return rows
    positions = np.asarray(present, np.int32)[:, None]
    return tf.scatter_nd(positions, rows, [len(grads), _N_VAR_GRAD])


@kernel("grad_stats")
def grad_table(
    grads: Sequence[Any], rollup: RollUp, columns: Collection[str] = OPTIONAL_GRAD_COLUMNS
) -> tf.Tensor:
    """The GRAD_STATS table [n_scopes, len(GRAD_COLUMNS)] (float32) of one loss.

    `grads` is index-aligned with the layout's variables (None where the loss
    gives no gradient). Columns: grad_vars, l2, max_abs, nonfinite, zero_frac;
    an optional column ("max_abs", "zero_frac") left out of `columns` is not
    computed and reads NaN, "not recorded" (recorded, it is never NaN).
    """
    if len(grads) != rollup.n_variables:
        raise ValueError(
            f"grad_table got {len(grads)} gradients for a layout of "
            f"{rollup.n_variables} variables; align them with layout.variable_names"
        )
    per_var = variable_grad_stats(grads, columns)
    sums = tf.unstack(rollup.sum(per_var), axis=1)  # one op for every column
    not_recorded = np.full([rollup.n_scopes], np.nan)
    table = tf.stack(
        [
            sums[_PRESENT],
            tf.sqrt(sums[_SUMSQ]),
            rollup.max(tf.unstack(per_var, axis=1)[_MAX_ABS])
            if "max_abs" in columns
            else not_recorded,
            sums[_NONFINITE],
            tf.math.divide_no_nan(sums[_ZEROS], sums[_COUNT])
            if "zero_frac" in columns
            else not_recorded,
        ],
        axis=1,
    )
    return tf.cast(table, tf.float32)


@kernel("update_stats")
def snapshot(variables: Sequence[Any]) -> list[tf.Tensor]:
    """Values of variables, read now (a transient copy for ||delta theta||).

    One read op each: a read shares the variable's buffer, and TF copies the
    buffer before an update writes to a variable whose value is still held, so
    the copy keeps the values before the step (an identity would add an op per
    variable and change nothing).
    """
    return [tf.convert_to_tensor(v) for v in variables]


@kernel("update_stats")
def update_table(
    before: Sequence[tf.Tensor | None], variables: Sequence[Any], rollup: RollUp
) -> tf.Tensor:
    """The UPDATE_STATS table [n_scopes, 2] (float32): ||after - before||, ||after||.

    The variables are read when this runs; call it after the optimizer step.
    A None in `before` marks a variable the step could not write (not handed to
    the optimizer): its update is 0 by construction, and it is not copied.
    """
    after = float_values([tf.convert_to_tensor(v) for v in variables])
    if after and not any(is_big(t) for t in after) and len({t.dtype for t in after}) == 1:
        return _small_update_table(before, after, rollup)
    weight = TensorGroup(after).sum_of_squares() if after else tf.zeros([0], tf.float64)
    handed = [i for i, old in enumerate(before) if old is not None]
    step = tf.zeros_like(weight)
    if handed:
        diffs = TensorGroup([after[i] - _float_values(before[i]) for i in handed])
        positions = np.asarray(handed, np.int32)[:, None]
        step = tf.scatter_nd(positions, diffs.sum_of_squares(), [len(after)])
    return update_table_of(tf.stack([step, weight], axis=1), rollup)


def _small_update_table(
    before: Sequence[tf.Tensor | None], after: Sequence[tf.Tensor], rollup: RollUp
) -> tf.Tensor:
    """`update_table` when every variable is small and of one dtype: one flat
    difference instead of one per variable (the same values, a few ops
    whatever the number of variables)."""
    group = TensorGroup(after)
    minus_one = (
        tf.constant([-1]) if any(b is not None and b.shape.rank != 1 for b in before) else None
    )
    olds = [
        a if b is None else tf.cast(_float_values(b, minus_one), a.dtype)
        for a, b in zip(after, before)
    ]
    handed = np.asarray([b is not None for b in before])
    return update_table_of(update_sums(group.segments, group.flat - concat(olds), handed), rollup)


@kernel("update_stats")
def update_sums(
    segments: Segments, change: tf.Tensor, handed: np.ndarray | None = None
) -> tf.Tensor:
    """Per tensor of `segments`, float64 [n, 2]: the sum of change^2 and of value^2.

    `segments.flat` holds the values after the step and `change` (aligned
    with it) what the step changed: after - before, or an update accumulated
    over several calls. `handed` (a bool per tensor) marks the tensors the
    step could write: the others' change is 0 by construction, even where a
    value is NaN.
    """
    step = tf.cast(segments.sum(tf.square(change)), tf.float64)
    if handed is not None and not handed.all():
        step = tf.where(handed, step, tf.zeros_like(step))
    weight = tf.cast(segments.sum(tf.square(segments.flat)), tf.float64)
    return tf.stack([step, weight], axis=1)


@kernel("update_stats")
def changed_counts(segments: Segments, before: tf.Tensor) -> tf.Tensor:
    """Per tensor, float64 [n]: how many elements of `segments.flat` differ
    from `before` (aligned with it); NaN counts as changed."""
    differ = tf.cast(tf.not_equal(segments.flat, before), segments.dtype)
    return tf.cast(segments.sum(differ), tf.float64)


@kernel("update_stats")
def update_table_of(per_var: tf.Tensor, rollup: RollUp) -> tf.Tensor:
    """The UPDATE_STATS table [n_scopes, 2] (float32) from `update_sums`."""
    return tf.cast(tf.sqrt(rollup.sum(per_var)), tf.float32)
