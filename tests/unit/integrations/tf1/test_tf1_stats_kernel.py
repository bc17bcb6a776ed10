"""One statistics kernel (`record.stats`) for TF2 and TF1: the same gradients
give bitwise the same tables eagerly and in a TF1 graph run by a Session."""

from __future__ import annotations

import numpy as np
import tensorflow.compat.v1 as tf

from tb_gradscope.record import _stats as stats
from tb_gradscope.record._reductions import BIG, Segments
from tb_gradscope.scopes import build_layout


def _gradient_values(rng) -> list:
    w = rng.normal(size=(4, 3)).astype(np.float32)
    w[0, 0] = 0.0
    bad = rng.normal(size=(3,)).astype(np.float32)
    bad[1], bad[2] = np.nan, np.inf
    return [
        w,
        bad,
        None,
        np.zeros(2, np.float64),
        rng.normal(size=(2, 2)).astype(np.float16),
        (rng.normal(size=(3, 2)).astype(np.float32), [0, 2, 0], [5, 2]),
        rng.normal(size=(BIG + 3,)).astype(np.float32),  # reduced on its own
    ]


def _tensors(values) -> list:
    return [
        None
        if v is None
        else tf.IndexedSlices(*(tf.constant(p) for p in v))
        if isinstance(v, tuple)
        else tf.constant(v)
        for v in values
    ]


def test_a_tf1_graph_gives_bitwise_the_eager_grad_table():
    names = ["net/a/w", "net/a/b", "net/b/w", "net/b/b", "head/w", "emb/table", "big/w"]
    layout = build_layout(names)
    rollup = stats.RollUp.from_layout(layout)
    values = _gradient_values(np.random.default_rng(0))
    eager = stats.grad_table(_tensors(values), rollup).numpy()
    g = tf.Graph()
    with g.as_default():
        table = stats.grad_table(_tensors(values), rollup)
        with tf.Session(graph=g) as sess:
            ours = sess.run(table)
    assert ours.shape == (len(layout.scopes), 5)
    assert ours.tobytes() == eager.tobytes()
    row = dict(zip(layout.scopes, ours))
    assert row["net/b"][0] == 1  # one of its two variables has a gradient
    assert row["net/a"][3] == 2  # NaN and Inf counted
    assert row["emb"][4] == 6 / 10  # untouched and summed-to rows are dense zeros


def test_zero_size_variable_at_the_end_keeps_its_row():
    layout = build_layout(["net/w", "net/empty"])
    rollup = stats.RollUp.from_layout(layout)
    g = tf.Graph()
    with g.as_default():
        grads = [tf.constant([3.0, 4.0]), tf.zeros([0])]
        with tf.Session(graph=g) as sess:
            ours = sess.run(stats.grad_table(grads, rollup))
    assert list(ours[layout.index("net")][:4]) == [2, 5.0, 4.0, 0]  # both have a gradient


def test_a_table_where_every_variable_has_a_gradient_is_bitwise_the_scattered_one():
    rng = np.random.default_rng(2)
    names = ["net/a/w", "net/a/b", "net/b/w"]
    values = [rng.normal(size=s).astype(np.float32) for s in ((4, 3), (3,), (3, 2))]
    full, holed = build_layout(names), build_layout(names + ["zzz/none"])
    g = tf.Graph()
    with g.as_default():
        grads = [tf.constant(v) for v in values]
        dense = stats.grad_table(grads, stats.RollUp.from_layout(full))
        scattered = stats.grad_table(grads + [None], stats.RollUp.from_layout(holed))
        assert "ScatterNd" not in {op.type for op in _ops_of(dense)}
        assert "ScatterNd" in {op.type for op in _ops_of(scattered)}
        with tf.Session(graph=g) as sess:
            dense, scattered = sess.run([dense, scattered])
    for scope in full.scopes:
        assert dense[full.index(scope)].tobytes() == scattered[holed.index(scope)].tobytes()


def _ops_of(tensor) -> set:
    seen, stack = set(), [tensor.op]
    while stack:
        op = stack.pop()
        if op not in seen:
            seen.add(op)
            stack.extend(t.op for t in op.inputs)
    return seen


def test_the_tf1_flat_snapshot_gives_bitwise_the_eager_update_table():
    """TF1 keeps one flat snapshot and reduces against it with `update_sums`;
    TF2 hands `update_table` the values before: the same sums."""
    rng = np.random.default_rng(1)
    layout = build_layout(["online/l1/w", "online/l1/b", "online/l2/w"])
    rollup = stats.RollUp.from_layout(layout)
    before = [rng.normal(size=s).astype(np.float32) for s in [(3, 2), (2,), (2, 1)]]
    after = [b + rng.normal(size=b.shape).astype(np.float32) * 0.1 for b in before]
    after[2] = before[2].copy()
    eager = stats.update_table([tf.constant(b) for b in before], after, rollup).numpy()
    g = tf.Graph()
    with g.as_default():
        now, then = Segments([tf.constant(a) for a in after]), Segments(before)
        table = stats.update_table_of(stats.update_sums(now, now.flat - then.flat), rollup)
        changed = stats.changed_counts(now, then.flat)
        with tf.Session(graph=g) as sess:
            ours, changed = sess.run([table, changed])
    assert ours.tobytes() == eager.tobytes()
    assert list(changed) == [6, 2, 0]  # changed elements per variable
