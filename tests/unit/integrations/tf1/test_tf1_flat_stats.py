"""The TF1 path's constant-op-count kernels agree with record.stats' kernel."""

from __future__ import annotations

import numpy as np
import tensorflow.compat.v1 as tf

from tb_gradscope.integrations.tf1 import flat_stats as flat
from tb_gradscope.record import stats as record_stats
from tb_gradscope.scopes import build_layout


def test_flat_grad_table_matches_record_kernel():
    rng = np.random.default_rng(0)
    names = ["net/a/w", "net/a/b", "net/b/w", "net/b/b", "head/w", "emb/table"]
    layout = build_layout(names)
    rollup = record_stats.RollUp.from_layout(layout)
    w = rng.normal(size=(4, 3)).astype(np.float32)
    w[0, 0] = 0.0
    bad = rng.normal(size=(3,)).astype(np.float32)
    bad[1], bad[2] = np.nan, np.inf
    g = tf.Graph()
    with g.as_default():
        grads = [
            tf.constant(w),
            tf.constant(bad),
            None,
            tf.constant(np.zeros(2, np.float64)),
            tf.constant(rng.normal(size=(2, 2)).astype(np.float16)),
            tf.IndexedSlices(
                tf.constant(rng.normal(size=(3, 2)).astype(np.float32)),
                tf.constant([0, 2, 0]),
                tf.constant([5, 2]),
            ),
        ]
        ours = flat.grad_table(grads, rollup)
        theirs = record_stats.grad_table(grads, rollup)
        with tf.Session(graph=g) as sess:
            ours, theirs = sess.run([ours, theirs])
    assert ours.shape == (len(layout.scopes), 5)
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, equal_nan=True)
    row = dict(zip(layout.scopes, ours))
    assert row["net/b"][0] == 1  # one of its two variables has a gradient
    assert row["net/a"][3] == 2  # NaN and Inf counted
    assert row["emb"][4] == 6 / 10  # untouched and summed-to rows are dense zeros


def test_zero_size_variable_at_the_end_keeps_its_row():
    layout = build_layout(["net/w", "net/empty"])
    rollup = record_stats.RollUp.from_layout(layout)
    g = tf.Graph()
    with g.as_default():
        grads = [tf.constant([3.0, 4.0]), tf.zeros([0])]
        with tf.Session(graph=g) as sess:
            ours, theirs = sess.run(
                [flat.grad_table(grads, rollup), record_stats.grad_table(grads, rollup)]
            )
    np.testing.assert_allclose(ours, theirs)
    assert ours[layout.index("net")][1] == 5.0


def test_a_table_where_every_variable_has_a_gradient_is_bitwise_the_scattered_one():
    rng = np.random.default_rng(2)
    names = ["net/a/w", "net/a/b", "net/b/w"]
    values = [rng.normal(size=s).astype(np.float32) for s in ((4, 3), (3,), (3, 2))]
    full, holed = build_layout(names), build_layout(names + ["zzz/none"])
    g = tf.Graph()
    with g.as_default():
        grads = [tf.constant(v) for v in values]
        dense = flat.grad_table(grads, record_stats.RollUp.from_layout(full))
        scattered = flat.grad_table(grads + [None], record_stats.RollUp.from_layout(holed))
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


def test_flat_update_table_matches_record_kernel():
    rng = np.random.default_rng(1)
    names = ["online/l1/w", "online/l1/b", "online/l2/w"]
    layout = build_layout(names)
    rollup = record_stats.RollUp.from_layout(layout)
    before = [rng.normal(size=s).astype(np.float32) for s in [(3, 2), (2,), (2, 1)]]
    after = [b + rng.normal(size=b.shape).astype(np.float32) * 0.1 for b in before]
    after[2] = before[2].copy()
    g = tf.Graph()
    with g.as_default():
        old = [tf.constant(b) for b in before]
        new = [tf.constant(a) for a in after]
        per_var = flat.update_sums(
            flat.flatten(new, tf.float32),
            flat.flatten(old, tf.float32),
            flat.segment_ids(new),
            len(new),
        )
        changed = flat.changed_counts(
            flat.flatten(new, tf.float32),
            flat.flatten(old, tf.float32),
            flat.segment_ids(new),
            len(new),
        )
        ours = flat.update_table(per_var, rollup)
        theirs = record_stats.update_table(old, new, rollup)
        with tf.Session(graph=g) as sess:
            ours, theirs, changed = sess.run([ours, theirs, changed])
    np.testing.assert_allclose(ours, theirs, rtol=1e-6)
    assert list(changed) == [6, 2, 0]  # changed elements per variable
