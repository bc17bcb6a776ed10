"""Gradient conflict: the cosine between two losses' gradients, per shared scope.

For a pair of losses (a, b) and a scope S, the cosine of their gradients over
S's parameters is sum_v<g_a,v, g_b,v> / sqrt(sum_v |g_a,v|^2 * sum_v |g_b,v|^2),
the sums running over S's variables. Per-variable dot products and sums of
squares are reduced with a bounded number of ops (`reductions.TensorGroup`) and
rolled up to every scope with the same segment sum as the gradient tables.

A scope is *shared* by a and b when both give a gradient (not None) to at least
one of its variables; which gradients are None is known when the step is
traced, so a pair's rows are fixed per trace. -1 means the two losses pull the
scope in opposite directions, 0 that they are orthogonal; NaN when either
gradient is exactly zero over the scope. Pure TensorFlow (eager, tf.function,
XLA).
"""

from __future__ import annotations

import itertools
from typing import Any, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tb_gradscope.record.reductions import TensorGroup
from tb_gradscope.record.stats import RollUp
from tb_gradscope.scopes import ScopeLayout

_no_autograph = tf.autograph.experimental.do_not_convert

SEPARATOR = "|"


def pair_name(a: str, b: str) -> str:
    """The CONFLICT record name of losses a and b: "a|b"."""
    return f"{a}{SEPARATOR}{b}"


def loss_pairs(losses: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair of losses, in the order the losses were given."""
    return list(itertools.combinations(losses, 2))


def shared_rows(
    grads_a: Sequence[Any], grads_b: Sequence[Any], layout: ScopeLayout
) -> list[int]:
    """Indices of the scopes where both losses give some variable a gradient.

    `grads_a` and `grads_b` are aligned with the layout's variables (None where
    a loss gives no gradient).
    """
    return [
        row
        for row, members in enumerate(layout.members)
        if any(grads_a[i] is not None for i in members)
        and any(grads_b[i] is not None for i in members)
    ]


def _flat(grad: Any) -> tf.Tensor:
    """A gradient as a flat float32/float64 dense vector (IndexedSlices densified)."""
    flat = tf.reshape(tf.convert_to_tensor(grad), [-1])
    return flat if flat.dtype in (tf.float32, tf.float64) else tf.cast(flat, tf.float32)


@_no_autograph
def conflict_table(
    grads_a: Sequence[Any],
    grads_b: Sequence[Any],
    rollup: RollUp,
    rows: Sequence[int],
) -> tf.Tensor:
    """The CONFLICT table [len(rows), 1] (float32): the cosine per shared scope.

    `rows` are the shared scopes' indices (from `shared_rows`). Variables where
    either gradient is None contribute their sum of squares to the loss that
    has one, and nothing to the dot product.
    """
    if len(grads_a) != rollup.n_variables or len(grads_b) != rollup.n_variables:
        raise ValueError(
            f"conflict_table got {len(grads_a)} and {len(grads_b)} gradients for a "
            f"layout of {rollup.n_variables} variables; align them with the layout"
        )
    n = rollup.n_variables
    dots = _per_variable(
        [i for i in range(n) if grads_a[i] is not None and grads_b[i] is not None],
        lambda i: _flat(grads_a[i]) * _flat(grads_b[i]),
        n,
        squared=False,
    )
    sq_a = _per_variable([i for i in range(n) if grads_a[i] is not None], lambda i: _flat(grads_a[i]), n)
    sq_b = _per_variable([i for i in range(n) if grads_b[i] is not None], lambda i: _flat(grads_b[i]), n)
    sums = rollup.sum(tf.stack([dots, sq_a, sq_b], axis=1))
    picked = tf.gather(sums, np.asarray(rows, np.int32))
    cosine = picked[:, 0] / tf.sqrt(picked[:, 1] * picked[:, 2])
    return tf.cast(cosine[:, None], tf.float32)


def _per_variable(present: Sequence[int], vector, n: int, squared: bool = True) -> tf.Tensor:
    """float64 [n]: sum of squares (or plain sum) of `vector(i)` for i in `present`, else 0."""
    if not present:
        return tf.zeros([n], tf.float64)
    group = TensorGroup([vector(i) for i in present])
    values = group.sum_of_squares() if squared else group.reduce(
        tf.reduce_sum, lambda f, ids, k: tf.math.unsorted_segment_sum(f, ids, k)
    )
    if len(present) == n:
        return values
    return tf.scatter_nd(np.asarray(present, np.int32)[:, None], values, [n])


def conflict_tables(
    aligned: Mapping[str, Sequence[Any]], layout: ScopeLayout, rollup: RollUp
) -> dict[tuple[str, str], tuple[list[int], Any]]:
    """{(a, b): (shared rows, table maker)} for every pair of losses sharing a scope."""
    out = {}
    for a, b in loss_pairs(list(aligned)):
        rows = shared_rows(aligned[a], aligned[b], layout)
        if rows:
            out[(a, b)] = (rows, lambda a=a, b=b, rows=rows: conflict_table(aligned[a], aligned[b], rollup, rows))
    return out
