"""The in-graph drift kernel: a pair's variables -> one DRIFT table per target scope.

With t, o the target and online values now, and tp, op their values one step
earlier (snapshots), per scope:

- drift = ||t - o|| / ||o||; distance = ||t - o||; online_norm = ||o||;
- target_step = ||t - tp||; gap = ||o - tp||; tau = <t - tp, o - tp> / gap^2,
  exact for an EMA taken after the optimizer step (t = tp + tau (o - tp)) and 1
  for a hard copy;
- online_step = ||o - op||; gap_reverse = ||t - op||; tau_reverse =
  <o - op, t - op> / gap_reverse^2: the same with roles swapped, > 0 when the
  online network is pulled toward the target (a copy in the wrong direction);
- optimizer_vars: how many of the scope's target variables an optimizer writes;
- target_moved: ||t - tr||, tr the target at the pair's previous DRIFT record
  (NaN at the first, and from writers that keep no such copy): the movement
  between two records, whatever step of the period the target update ran at
  (TD3's delayed targets on odd steps), which judges a sync expected between
  two records.

Without snapshots of the previous step, the step columns are NaN. Work is one
pass of products over the pairs' values laid out in rows (`RowLayout`), row
sums and one segment sum to [n_vars, 8] float64, rolled up to every scope by
one gather and one segment sum (`RollUp`), no host round trip. Pairs recorded
together share one kernel (`DriftMonitor`), so the op count barely grows with
the number of variables or pairs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.core.pairs import Pair
from tb_gradscope.format.metadata import DRIFT_COLUMNS
from tb_gradscope.record._op_scope import kernel
from tb_gradscope.record._reductions import concat
from tb_gradscope.record._stats import RollUp

# Columns of the per-variable sums (_F2: since the previous record, when kept).
_DIST2, _ON2, _A2, _AB, _B2, _C2, _CE, _E2, _F2 = range(9)


def flat_dtype(variables: Sequence[Any]) -> tf.DType:
    """The dtype a side is flattened to: its own if uniform, else float64."""
    dtypes = {tf.as_dtype(v.dtype) for v in variables}
    return dtypes.pop() if len(dtypes) == 1 else tf.float64


@kernel("drift")
def flatten(variables: Sequence[Any]) -> tf.Tensor:
    """All values of a side as one flat vector (a concat, not one op chain per variable)."""
    dtype = flat_dtype(variables)
    return concat([tf.reshape(tf.cast(tf.convert_to_tensor(v), dtype), [-1]) for v in variables])


@dataclasses.dataclass(frozen=True)
class RowLayout:
    """Variables laid out in rows of CHUNK values: each variable starts a row,
    and the rest of its last row is zeros.

    Per-variable sums are then a row sum (a vectorised reduction) and a segment
    sum over a few rows, instead of a segment sum over every value (TF's
    segment kernels cost ~2 ns a value, ~4x a vectorised sum). Zeros add
    nothing to the drift sums (every difference of two zeros is 0).
    """

    sizes: tuple[int, ...]

    @classmethod
    def of(cls, variables: Sequence[Any]) -> RowLayout:
        return cls(tuple(int(np.prod(v.shape)) for v in variables))

    @property
    def rows(self) -> np.ndarray:
        """Rows per variable (at least one, so no variable's segment is empty)."""
        return np.maximum(1, -(-np.asarray(self.sizes, np.int64) // CHUNK))

    @property
    def length(self) -> int:
        return int(self.rows.sum()) * CHUNK

    def row_ids(self) -> np.ndarray:
        """The variable each row belongs to (sorted)."""
        return np.repeat(np.arange(len(self.sizes), dtype=np.int32), self.rows)

    def padded(self, values: Sequence[tf.Tensor], dtype: tf.DType) -> list[tf.Tensor]:
        """The parts of one padded side: each value flat, then its zeros."""
        parts = []
        minus_one = tf.constant([-1])  # one shape for every reshape (an op, not one each)
        for value, size, rows in zip(values, self.sizes, self.rows):
            value = tf.cast(value, dtype)
            parts.append(value if value.shape.rank == 1 else tf.reshape(value, minus_one))
            if rows * CHUNK > size:
                parts.append(tf.zeros([int(rows * CHUNK - size)], dtype))
        return parts

    @kernel("drift")
    def pad(self, flat: tf.Tensor) -> tf.Tensor:
        """A flat side as `flatten` gives it -> the padded side: one gather from
        `flat` and a trailing zero (not a split with one output per variable)."""
        starts = np.cumsum([0, *self.sizes[:-1]], dtype=np.int64)
        row_starts = np.cumsum(self.rows * CHUNK) - self.rows * CHUNK
        source = np.full(self.length, sum(self.sizes), np.int64)  # the zero after `flat`
        for start, row_start, size in zip(starts, row_starts, self.sizes):
            source[row_start : row_start + size] = np.arange(start, start + size)
        return tf.gather(tf.concat([flat, tf.zeros([1], flat.dtype)], 0), source)


# Values per row of a RowLayout.
CHUNK = 32


@kernel("drift")
def sides_now(
    targets: Sequence[Any], onlines: Sequence[Any], layout: RowLayout, dtype: tf.DType
) -> tf.Tensor:
    """Targets then onlines, padded, as one flat vector of `dtype` (a concat)."""
    values = [tf.convert_to_tensor(v) for v in (*targets, *onlines)]
    n = len(targets)
    return concat(layout.padded(values[:n], dtype) + layout.padded(values[n:], dtype))


@kernel("drift")
def variable_sums(
    now: tf.Tensor, previous: tf.Tensor, layout: RowLayout, recorded: tf.Tensor | None = None
) -> tf.Tensor:
    """Per variable: the sums the DRIFT columns are made of, float64 [n_vars, 8]
    ([n_vars, 9] with `recorded`, the target padded at the previous record).

    `now` and `previous` are [target; online] padded by `layout` (`sides_now`).
    Computed in float64 (a float16 target may follow a float32 online network),
    so tau's residual is not lost to cancellation. A fixed number of ops
    whatever the number of variables or pairs.
    """
    rows = int(layout.rows.sum())
    sides = [now, previous] + ([tf.cast(recorded, now.dtype)] if recorded is not None else [])
    parts = 4 if recorded is None else 5  # [t; o] now, [t; o] before, t at the previous record
    x = tf.reshape(tf.cast(tf.concat(sides, 0), tf.float64), [parts, rows, CHUNK])
    t, o, tp, op, *at_record = tf.unstack(x)  # one op for every part, no slice each
    d, a, b, c, e = t - o, t - tp, o - tp, o - op, t - op
    products = (d * d, o * o, a * a, a * b, b * b, c * c, c * e, e * e)
    if at_record:
        f = t - at_record[0]
        products += (f * f,)
    per_row = tf.stack([tf.reduce_sum(p, axis=1) for p in products], axis=1)
    return tf.math.segment_sum(per_row, tf.constant(layout.row_ids()))


# How each column is computed, from the sums' square roots (`_ROOTS`), the
# sums themselves and two constants (the optimizer counts and ones):
# numerator / denominator, NaN where the denominator is not > 0 or the
# column's inputs are missing.
_ROOTS = (_DIST2, _ON2, _A2, _C2, _B2, _E2, _F2)
_ROOT_OF = {
    "distance": _DIST2,
    "online_norm": _ON2,
    "target_step": _A2,
    "online_step": _C2,
    "gap": _B2,
    "gap_reverse": _E2,
    "target_moved": _F2,
}
_RATIO_OF = {  # drift = distance / online_norm (of the roots); tau, tau_reverse of the sums
    "drift": (("root", _DIST2), ("root", _ON2)),
    "tau": (("sum", _AB), ("sum", _B2)),
    "tau_reverse": (("sum", _CE), ("sum", _E2)),
}
_NEED_PREVIOUS = {"target_step", "tau", "online_step", "gap", "tau_reverse", "gap_reverse"}


def _operand_indices(sum_columns: int) -> tuple[list[int], list[int]]:
    """Per DRIFT column, the operands' (numerator, denominator) indices in
    [roots, sums, optimizer counts, ones] (`drift_table`'s operand matrix)."""
    roots = [r for r in _ROOTS if r < sum_columns]
    counts, ones = len(roots) + sum_columns, len(roots) + sum_columns + 1

    def index(kind: str, column: int) -> int:
        return roots.index(column) if kind == "root" else len(roots) + column

    numerators, denominators = [], []
    for name in DRIFT_COLUMNS:
        if name in _RATIO_OF:
            (num_kind, num), (den_kind, den) = _RATIO_OF[name]
            numerators.append(index(num_kind, num))
            denominators.append(index(den_kind, den))
        elif name == "optimizer_vars":
            numerators.append(counts)
            denominators.append(ones)
        elif _ROOT_OF[name] < sum_columns:
            numerators.append(index("root", _ROOT_OF[name]))
            denominators.append(ones)
        else:  # target_moved without the sums since the previous record: NaN
            numerators.append(ones)
            denominators.append(ones)
    return numerators, denominators


@kernel("drift")
def drift_table(
    sums: tf.Tensor,
    have_previous: tf.Tensor,
    optimizer_vars: np.ndarray,
    have_recorded: tf.Tensor | None = None,
) -> tf.Tensor:
    """Scope sums [n_scopes, 8] -> the DRIFT table [n_scopes, len(DRIFT_COLUMNS)] (float32).

    With a 9th column of sums (since the previous record) and `have_recorded`
    (whether there was one), `target_moved` is filled; otherwise it is NaN.
    Every column is one numerator over one denominator (1 for a root or a
    count) gathered from one operand matrix: about two dozen ops whatever the
    number of columns, and each value bitwise the root or ratio it stands for.
    """
    sum_columns = int(sums.shape[1])
    roots = tf.sqrt(tf.gather(sums, [r for r in _ROOTS if r < sum_columns], axis=1))
    constants = np.stack(
        [np.asarray(optimizer_vars, np.float64), np.ones(len(optimizer_vars))], axis=1
    )
    operands = tf.concat([roots, sums, tf.constant(constants)], axis=1)
    numerators, denominators = _operand_indices(sum_columns)
    nums = tf.gather(operands, numerators, axis=1)
    dens = tf.gather(operands, denominators, axis=1)
    moved_kept = have_recorded if have_recorded is not None else tf.constant(False)
    inputs_there = tf.logical_and(
        tf.logical_or(have_previous, np.asarray([c not in _NEED_PREVIOUS for c in DRIFT_COLUMNS])),
        tf.logical_or(moved_kept, np.asarray([c != "target_moved" for c in DRIFT_COLUMNS])),
    )
    valid = tf.logical_and(inputs_there, dens > 0)
    nan = tf.constant(np.nan, tf.float64)
    return tf.cast(tf.where(valid, tf.math.divide_no_nan(nums, dens), nan), tf.float32)


@kernel("drift")
def pair_table(
    pair: Pair,
    rollup: RollUp,
    prev_target: tf.Tensor,
    prev_online: tf.Tensor,
    have_previous: tf.Tensor,
    optimizer_vars: np.ndarray,
) -> tf.Tensor:
    """The DRIFT table of `pair` now, against flat snapshots taken one step
    earlier (as `flatten` gives them)."""
    layout = RowLayout.of(pair.target)
    dtype = tf.float64 if prev_target.dtype != prev_online.dtype else prev_target.dtype
    now = sides_now(pair.target, pair.online, layout, dtype)
    previous = tf.concat(
        [layout.pad(tf.cast(prev_target, dtype)), layout.pad(tf.cast(prev_online, dtype))], 0
    )
    return drift_table(
        rollup.sum(variable_sums(now, previous, layout)), have_previous, optimizer_vars
    )
