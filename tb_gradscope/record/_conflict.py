"""Gradient conflict: the cosine between two losses' gradients, per shared scope.

For a pair of losses (a, b) and a scope S, the cosine of their gradients over
S's parameters is sum_v<g_a,v, g_b,v> / sqrt(sum_v |g_a,v|^2 * sum_v |g_b,v|^2),
the sums running over S's variables. All pairs come from one Gram computation
per step: per variable, the [losses x losses] dot products of its gradients (a
product-sum per pair of losses for a big variable; one gather, product and
segment sum for all the small ones together), rolled up to every scope once
with the same segment sum as the gradient tables. Each dot product and each
loss's sum of squares is computed once per step (not once per pair holding
that loss), and the graph does not grow per pair beyond slicing out its
cosines.

A scope is *shared* by a and b when both give a gradient (not None) to at least
one of its variables; which gradients are None is known when the step is
traced, so a pair's rows are fixed per trace. -1 means the two losses pull the
scope in opposite directions, 0 that they are orthogonal; NaN when either
gradient is exactly zero over the scope. Pure TensorFlow (eager, tf.function,
XLA).
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._reductions import concat, is_big, sum_of_squares
from tb_gradscope.record._stats import RollUp
from tb_gradscope.scopes import ScopeLayout

_no_autograph = tf.autograph.experimental.do_not_convert

SEPARATOR = "|"


def pair_name(a: str, b: str) -> str:
    """The CONFLICT record name of losses a and b: "a|b"."""
    return f"{a}{SEPARATOR}{b}"


def loss_pairs(losses: Sequence[str]) -> list[tuple[str, str]]:
    """Every unordered pair of losses, in the order the losses were given."""
    return list(itertools.combinations(losses, 2))


def shared_rows(grads_a: Sequence[Any], grads_b: Sequence[Any], layout: ScopeLayout) -> list[int]:
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
def scope_grams(aligned: Mapping[str, Sequence[Any]], rollup: RollUp) -> tf.Tensor:
    """float64 [n_scopes, k, k]: per scope, the dot products between the k losses'
    gradients (in `aligned`'s order; a None gradient counts as zero).

    `aligned` maps each loss to its gradients aligned with the layout's variables.
    """
    names = list(aligned)
    k, n = len(names), rollup.n_variables
    for name in names:
        if len(aligned[name]) != n:
            raise ValueError(
                f"conflict got {len(aligned[name])} gradients of loss '{name}' for a "
                f"layout of {n} variables; align them with the layout"
            )
    present = [
        [j for j, name in enumerate(names) if aligned[name][i] is not None] for i in range(n)
    ]
    used = [i for i in range(n) if present[i]]
    flats = {(i, j): _flat(aligned[names[j]][i]) for i in used for j in present[i]}
    big = [i for i in used if is_big(flats[(i, present[i][0])])]
    small = [i for i in used if i not in set(big)]
    parts, order = [], []
    for i in big:
        parts.append(_big_gram(present[i], [flats[(i, j)] for j in present[i]], k))
        order.append(i)
    if small:
        parts.append(_small_grams(small, present, flats, k))
        order.extend(small)
    if not parts:
        per_variable = tf.zeros([n, k * k], tf.float64)
    else:
        per_variable = tf.scatter_nd(
            np.asarray(order, np.int32)[:, None], concat(parts), [n, k * k]
        )
    return tf.reshape(rollup.sum(per_variable), [rollup.n_scopes, k, k])


def _big_gram(losses: Sequence[int], flats: Sequence[tf.Tensor], k: int) -> tf.Tensor:
    """float64 [1, k*k]: the Gram matrix of one big variable's gradients (`flats`,
    of the losses at `losses`): each dot product once, squares by the one-pass
    norm kernel.

    Not a [losses x elements] matmul: on TF's CPU kernels that tall-skinny
    product measured several times slower inside a training step.
    """
    values, cells = [], []
    for x, a in enumerate(losses):
        for y in range(x, len(losses)):
            b = losses[y]
            if a == b:
                values.append(tf.cast(sum_of_squares(flats[x]), tf.float64))
            else:
                values.append(tf.cast(tf.reduce_sum(flats[x] * flats[y]), tf.float64))
            cells.append(sorted({a * k + b, b * k + a}))
    index = np.asarray([c for pair in cells for c in pair], np.int32)[:, None]
    repeated = tf.stack([v for v, pair in zip(values, cells) for _ in pair])
    return tf.scatter_nd(index, repeated, [k * k])[None]


def _small_grams(
    small: Sequence[int],
    present: Sequence[Sequence[int]],
    flats: Mapping[tuple[int, int], tf.Tensor],
    k: int,
) -> tf.Tensor:
    """float64 [len(small), k*k]: the Gram matrices of the small variables, from one
    [losses x elements] matrix (zeros where a loss gives no gradient).

    Rows are gathered (contiguous) and the sums taken by the sorted segment
    kernel: the elements of a variable are contiguous, and a column gather or
    an unsorted segment sum over several columns is several times slower on CPU.
    """
    sizes = [flats[(i, present[i][0])].shape.num_elements() for i in small]
    dtype = tf.float64 if any(t.dtype == tf.float64 for t in flats.values()) else tf.float32
    rows = []
    for j in range(k):
        pieces = [
            tf.cast(flats[(i, j)], dtype) if (i, j) in flats else tf.zeros([size], dtype)
            for i, size in zip(small, sizes)
        ]
        rows.append(concat(pieces))
    matrix = tf.stack(rows)  # [k, elements]
    upper = [(a, b) for a in range(k) for b in range(a, k)]
    products = tf.transpose(
        tf.gather(matrix, [a for a, _ in upper]) * tf.gather(matrix, [b for _, b in upper])
    )
    ids = np.repeat(np.arange(len(small), dtype=np.int32), sizes)
    # The kernel asks the graph it is built in (eager callers' is traced apart).
    if ExecutionContext.current().xla:  # XLA needs the number of segments statically
        sums = tf.math.unsorted_segment_sum(products, ids, len(small))
    else:
        sums = tf.math.segment_sum(products, ids)
        sums = tf.pad(
            sums, [[0, len(small) - tf.shape(sums)[0]], [0, 0]]
        )  # trailing empty variables
    column_of = {pair: c for c, pair in enumerate(upper)}
    full = [column_of[(min(a, b), max(a, b))] for a in range(k) for b in range(k)]
    return tf.gather(tf.cast(sums, tf.float64), full, axis=1)


def conflict_tables(
    aligned: Mapping[str, Sequence[Any]], layout: ScopeLayout, rollup: RollUp
) -> dict[tuple[str, str], tuple[list[int], Any]]:
    """{(a, b): (shared rows, table maker)} for every pair of losses sharing a scope.

    A maker returns the CONFLICT table [len(rows), 1] (float32): the cosine per
    shared scope. The Gram matrices behind all of them are computed once, by the
    first maker called (all must be called in the same graph).
    """
    names = list(aligned)
    found = {}
    for a, b in loss_pairs(names):
        rows = shared_rows(aligned[a], aligned[b], layout)
        if rows:
            found[(a, b)] = rows
    cosines: list[tf.Tensor] = []

    def cosine_matrix() -> tf.Tensor:
        if not cosines:
            gram = scope_grams(aligned, rollup)
            norms = tf.sqrt(tf.linalg.diag_part(gram))
            cosines.append(gram / (norms[:, :, None] * norms[:, None, :]))
        return cosines[0]

    def make(a: str, b: str, rows: list[int]) -> tf.Tensor:
        cosine = cosine_matrix()[:, names.index(a), names.index(b)]
        return tf.cast(tf.gather(cosine, np.asarray(rows, np.int32))[:, None], tf.float32)

    return {
        pair: (rows, lambda pair=pair, rows=rows: make(*pair, rows)) for pair, rows in found.items()
    }
