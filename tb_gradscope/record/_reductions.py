"""Per-tensor reductions over many tensors with few ops.

Graph building and op dispatch cost per op, so a model with thousands of small
variables must not get a handful of ops (let alone a tf.cond) per variable.
Small tensors are concatenated into one flat vector and reduced by segment ops
(a constant number of ops); big ones are reduced one by one with the fused
single-pass kernels, which avoids copying them. Results come back in the
caller's order as float64 vectors.

Ops with one input per variable are built as trees of bounded fan-in
(`concat`): TF's graph optimizer (grappler's shape inference) takes time
superlinear in one op's number of inputs, and one ConcatV2 of 10,000 inputs
kept a 10,000-variable step's first run busy for half an hour.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import tensorflow as tf

from tb_gradscope.record._context import ExecutionContext

# Tensors with at least this many elements are reduced one by one.
BIG = 1 << 16
# Above this many elements a float32 count may be inexact.
_FLOAT_COUNT_LIMIT = 1 << 24
# Most inputs of one concat built by `concat`: more parts are joined as a tree.
FAN_IN = 256


def concat(parts: Sequence[tf.Tensor], axis: int = 0, fan_in: int | None = None) -> tf.Tensor:
    """`parts` joined along `axis`, in order: the same values as one tf.concat.

    At most `fan_in` (default FAN_IN) parts go into one op; more are joined in
    consecutive groups, then the groups, and so on (order and values
    unchanged, a few extra ops per FAN_IN parts). One part is returned as it is.
    """
    fan_in = FAN_IN if fan_in is None else fan_in
    if fan_in < 2:
        raise ValueError(f"concat: fan_in must be at least 2, got {fan_in}")
    parts = list(parts)
    if not parts:
        raise ValueError("concat: no parts to join; pass at least one tensor")
    while len(parts) > 1:
        groups = [parts[i : i + fan_in] for i in range(0, len(parts), fan_in)]
        parts = [group[0] if len(group) == 1 else tf.concat(group, axis) for group in groups]
    return parts[0]


def stack(parts: Sequence[tf.Tensor], fan_in: int | None = None) -> tf.Tensor:
    """tf.stack(parts) (axis 0) with at most `fan_in` (default FAN_IN) inputs per op."""
    fan_in = FAN_IN if fan_in is None else fan_in
    parts = list(parts)
    if len(parts) <= fan_in:
        return tf.stack(parts)
    return concat(
        [tf.stack(parts[i : i + fan_in]) for i in range(0, len(parts), fan_in)], 0, fan_in
    )


class Segments:
    """Tensors as one flat vector, and for each element the index of its tensor.

    Flatten once, reduce per tensor by segment ops: each tensor adds its
    reshape (none for rank 1) and at most a cast, joined by `concat`; every
    reduction is then one op however many tensors. The flat vector is float64
    if any tensor is, else float32 (f16/bf16 sum in f32).

    Args:
      tensors: float tensors (or variables, read once here) of any shape.
    """

    def __init__(self, tensors: Sequence[tf.Tensor]):
        values = [tf.convert_to_tensor(t) for t in tensors]
        if not values:
            raise ValueError("Segments: no tensors; pass at least one")
        self.n = len(values)
        self.dtype = tf.float64 if any(v.dtype == tf.float64 for v in values) else tf.float32
        minus_one = tf.constant([-1]) if any(v.shape.rank != 1 for v in values) else None
        parts = [v if v.shape.rank == 1 else tf.reshape(v, minus_one) for v in values]
        self.flat = concat([tf.cast(p, self.dtype) for p in parts])
        sizes = [v.shape.num_elements() for v in values]
        if None in sizes:
            self.ids = tf.repeat(
                tf.range(self.n, dtype=tf.int32),
                stack([tf.size(v, out_type=tf.int32) for v in values]),
            )
        else:
            self.ids = tf.constant(np.repeat(np.arange(self.n, dtype=np.int32), sizes))
        # Sorted ids and no empty segment: TF's sorted segment kernels, ~3x
        # faster than the unsorted ones on CPU, and bitwise the same sums
        # (XLA has no kernel for them). An empty or unknown-size tensor needs
        # the unsorted ones, which give every segment its row.
        # The kernel asks the graph it is built in (TF1, Keras and eager callers' own).
        self._sorted = (
            not ExecutionContext.current().xla and None not in sizes and all(s > 0 for s in sizes)
        )

    def sum(self, values: tf.Tensor) -> tf.Tensor:
        """Per tensor: the sum of `values` (aligned with `flat`), in their dtype."""
        if self._sorted:
            return tf.math.segment_sum(values, self.ids)
        return tf.math.unsorted_segment_sum(values, self.ids, self.n)

    def max(self, values: tf.Tensor) -> tf.Tensor:
        """Per tensor: the max of `values` (the dtype's lowest for an empty tensor)."""
        if self._sorted:
            return tf.math.segment_max(values, self.ids)
        return tf.math.unsorted_segment_max(values, self.ids, self.n)


class TensorGroup:
    """Flat float tensors, reduced per tensor: big ones alone, small ones together.

    Args:
      tensors: rank-1 float tensors (float32 or float64).
    """

    def __init__(self, tensors: Sequence[tf.Tensor]):
        self.tensors = list(tensors)
        sizes = [t.shape.num_elements() for t in self.tensors]
        self.elements = None if None in sizes else sum(sizes)  # in all the tensors, when known
        self.big = [i for i, t in enumerate(self.tensors) if is_big(t)]
        self.small = [i for i, t in enumerate(self.tensors) if not is_big(t)]
        order = self.big + self.small
        # None when big-then-small is already the caller's order (no gather needed).
        self._inverse = (
            None
            if order == sorted(order)
            else np.argsort(np.asarray(order, np.int64)).astype(np.int32)
        )
        self.segments = Segments([self.tensors[i] for i in self.small]) if self.small else None
        self.flat = None if self.segments is None else self.segments.flat

    def segment_sum(self, values: tf.Tensor) -> tf.Tensor:
        """Per small tensor: the sum of `values` (aligned with `flat`)."""
        return self.segments.sum(values)

    def segment_max(self, values: tf.Tensor) -> tf.Tensor:
        """Per small tensor: the max of `values` (aligned with `flat`)."""
        return self.segments.max(values)

    def reduce(
        self,
        one: Callable[[tf.Tensor], tf.Tensor],
        segments: Callable[[tf.Tensor], tf.Tensor],
    ) -> tf.Tensor:
        """float64 [len(tensors)]: `one(t)` for big tensors, `segments(flat)` for the small ones."""
        parts = []
        if self.big:
            values = [one(self.tensors[i]) for i in self.big]
            # e.g. float32 and float64 sums, float and int counts
            if len({v.dtype for v in values}) > 1:
                values = [tf.cast(v, tf.float64) for v in values]
            parts.append(tf.cast(stack(values), tf.float64))
        if self.small:
            parts.append(tf.cast(segments(self.flat), tf.float64))
        if not parts:
            return tf.zeros([0], tf.float64)
        joined = concat(parts)
        return joined if self._inverse is None else tf.gather(joined, self._inverse)

    def sum_of_squares(self) -> tf.Tensor:
        return self.reduce(sum_of_squares, lambda f: self.segment_sum(tf.square(f)))

    def finite_stats(self, max_abs: bool = True, nonzero: bool = True) -> dict[str, tf.Tensor]:
        """{"max_abs": max |v|, "nonfinite": 0, "nonzero": nonzero count} when every
        element is finite; `max_abs` / `nonzero` False leave that pass out (and its key)."""
        out = {}
        if max_abs:
            out["max_abs"] = tf.maximum(
                self.reduce(
                    lambda t: tf.maximum(tf.reduce_max(t), -tf.reduce_min(t)),
                    lambda f: self.segment_max(tf.abs(f)),
                ),
                0,
            )
        out["nonfinite"] = tf.zeros([len(self.tensors)], tf.float64)
        if nonzero:
            out["nonzero"] = self._nonzero()
        return out

    def any_stats(self, max_abs: bool = True, nonzero: bool = True) -> dict[str, tf.Tensor]:
        """`finite_stats` for any values: max |v| over finite elements, the non-finite count."""

        finite = {}  # one IsFinite per tensor (and one for the flat small ones)

        def is_finite(t):
            if t.ref() not in finite:
                finite[t.ref()] = tf.math.is_finite(t)
            return finite[t.ref()]

        def finite_abs(t):  # a scalar zero: no zeros pass
            return tf.where(is_finite(t), tf.abs(t), tf.constant(0, t.dtype))

        out = {}
        if max_abs:
            out["max_abs"] = tf.maximum(
                self.reduce(
                    lambda t: tf.reduce_max(finite_abs(t)),
                    lambda f: self.segment_max(finite_abs(f)),
                ),
                0,
            )
        out["nonfinite"] = self.reduce(
            lambda t: tf.reduce_sum(tf.cast(tf.logical_not(is_finite(t)), tf.int64)),
            lambda f: self.segment_sum(tf.cast(tf.logical_not(is_finite(f)), f.dtype)),
        )
        if nonzero:
            out["nonzero"] = self._nonzero()
        return out

    def _nonzero(self) -> tf.Tensor:
        return self.reduce(
            _count_nonzero, lambda f: self.segment_sum(tf.cast(tf.not_equal(f, 0), f.dtype))
        )


def is_big(t: tf.Tensor) -> bool:
    """Reduced on its own rather than in a group: at least BIG elements, or unknown size."""
    size = t.shape.num_elements()
    return size is None or size >= BIG


def sum_of_squares(t: tf.Tensor) -> tf.Tensor:
    """sum(t**2) of one tensor in one pass: the fused euclidean-norm kernel, which XLA lacks."""
    if ExecutionContext.current().xla:  # the graph it is built in, as `Segments`
        return tf.reduce_sum(tf.square(t))
    return tf.square(tf.math.reduce_euclidean_norm(t))


def _count_nonzero(t: tf.Tensor) -> tf.Tensor:
    """A comparison, not sign(|t|): TF flushes subnormals to zero in arithmetic."""
    size = t.shape.num_elements()
    if size is not None and size < _FLOAT_COUNT_LIMIT:
        return tf.reduce_sum(tf.cast(tf.not_equal(t, 0), tf.float32))
    return tf.math.count_nonzero(t, dtype=tf.int64)
