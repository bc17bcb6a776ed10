"""The in-graph stats kernel against numpy: dense, None, IndexedSlices, NaN/Inf, TF1 graphs."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from tb_gradscope import scopes as scopes_lib
from tb_gradscope.record import _stats as stats
from tests.support.record_fixtures import assert_table_close, np_grad_table, np_update_table

NAMES = ["online/l1/kernel", "online/l1/bias", "online/l2/kernel", "target/l1/kernel", "bias"]
SHAPES = [(4, 3), (3,), (3, 2), (4, 3), (2,)]


def _layout(names=NAMES, spec=None):
    layout = scopes_lib.build_layout(names, spec)
    return layout, stats.RollUp.from_layout(layout)


def _grads(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=s).astype(np.float32) for s in SHAPES]


def test_dense_gradients_match_numpy_on_every_scope_level():
    layout, rollup = _layout()
    grads = _grads()
    grads[1][0] = 0.0
    table = stats.grad_table([tf.constant(g) for g in grads], rollup)
    assert table.shape == (len(layout.scopes), len(stats.GRAD_COLUMNS))
    assert_table_close(
        table.numpy(), np_grad_table(layout.scopes, layout.variable_leaf, grads), "dense"
    )
    row = dict(zip(layout.scopes, table.numpy()))
    assert row["online"][0] == 3  # grad_vars rolls up: online/l1 (2) + online/l2 (1)


def test_no_gradient_is_distinct_from_zero_gradient():
    layout, rollup = _layout()
    grads = _grads()
    tensors = [tf.constant(g) for g in grads]
    tensors[3] = None  # target/l1: no gradient
    tensors[4] = tf.zeros(SHAPES[4])  # bias: gradient that is exactly zero
    table = dict(zip(layout.scopes, stats.grad_table(tensors, rollup).numpy()))
    np.testing.assert_array_equal(table["target"], [0, 0, 0, 0, 0])
    np.testing.assert_array_equal(table["bias"], [1, 0, 0, 0, 1])


def test_indexed_slices_with_duplicate_indices_equal_the_dense_gradient():
    names = ["emb/table", "emb/proj"]
    layout, rollup = _layout(names)
    values = tf.constant([[1.0, -2.0], [3.0, 0.5], [-1.0, 2.0], [0.0, 0.0]])
    indices = tf.constant([4, 1, 4, 2])  # row 4 twice: its values cancel to exact zeros
    slices = tf.IndexedSlices(values, indices, dense_shape=tf.constant([6, 2]))
    proj = tf.constant([[0.0, 7.0]])
    table = stats.grad_table([slices, proj], rollup)
    dense = tf.convert_to_tensor(slices).numpy()
    expected = np_grad_table(layout.scopes, layout.variable_leaf, [dense, proj.numpy()])
    assert_table_close(table.numpy(), expected, "indexed slices")
    # Without summing duplicates first the norm would count rows 4 twice.
    assert table.numpy()[layout.index("emb"), 1] == pytest.approx(np.sqrt(9 + 0.25 + 49))


def test_indexed_slices_without_dense_shape_use_their_rows():
    layout, rollup = _layout(["emb/table"])
    slices = tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([0]))
    table = stats.grad_table([slices], rollup).numpy()
    np.testing.assert_allclose(table[0], [1, np.sqrt(5), 2, 0, 0])


def test_nonfinite_values_are_counted_and_max_abs_skips_them():
    layout, rollup = _layout(["a/w"])
    grad = np.array([1.0, -5.0, np.nan, np.inf, 0.0], np.float32)
    table = stats.grad_table([tf.constant(grad)], rollup).numpy()[0]
    assert table[0] == 1 and np.isnan(table[1])
    assert table[2] == 5.0 and table[3] == 2 and table[4] == pytest.approx(0.2)


def test_half_precision_gradients_are_summed_in_float32():
    layout, rollup = _layout(["a/w"])
    grad = np.full([1000], 300.0, np.float16)  # sum of squares overflows float16
    table = stats.grad_table([tf.constant(grad)], rollup).numpy()[0]
    assert table[1] == pytest.approx(np.sqrt(1000) * 300, rel=1e-5)


def test_update_table_matches_numpy():
    layout, rollup = _layout()
    before = _grads(1)
    after = _grads(2)
    variables = [tf.Variable(a) for a in after]
    table = stats.update_table([tf.constant(b) for b in before], variables, rollup)
    assert_table_close(
        table.numpy(), np_update_table(layout.scopes, layout.variable_leaf, before, after), "update"
    )


def test_kernel_runs_in_tf1_graph_mode():
    layout, rollup = _layout()
    grads = _grads(3)
    graph = tf.Graph()
    with graph.as_default():
        placeholders = [tf.compat.v1.placeholder(tf.float32, s) for s in SHAPES]
        table = stats.grad_table(placeholders[:3] + [None, placeholders[4]], rollup)
        with tf.compat.v1.Session(graph=graph) as sess:
            value = sess.run(table, dict(zip(placeholders, grads)))
    expected = np_grad_table(layout.scopes, layout.variable_leaf, grads[:3] + [None, grads[4]])
    assert_table_close(value, expected, "tf1")


def test_kernel_compiles_with_xla():
    layout, rollup = _layout()
    grads = [tf.constant(g) for g in _grads(4)]
    compiled = tf.function(lambda gs: stats.grad_table(gs, rollup), jit_compile=True)
    assert_table_close(
        compiled(grads).numpy(), stats.grad_table(grads, rollup).numpy(), "xla vs eager"
    )


def test_wrong_number_of_gradients_names_the_fix():
    _, rollup = _layout()
    with pytest.raises(ValueError, match="align them with layout.variable_names"):
        stats.grad_table([None], rollup)


# Subnormals excluded: TF's CPU kernels flush them to zero (so does the recorder).
_finite = st.floats(-1e3, 1e3, width=32, allow_subnormal=False)
_special = st.sampled_from([0.0, -0.0, float("nan"), float("inf"), float("-inf")])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.one_of(st.none(), st.lists(st.one_of(_finite, _special), min_size=1, max_size=12)),
        min_size=len(NAMES),
        max_size=len(NAMES),
    )
)
def test_any_gradient_values_match_numpy(values):
    names = [f"{n}_{i}" for i, n in enumerate(NAMES)]
    layout, rollup = _layout(names)
    grads = [None if v is None else np.asarray(v, np.float32) for v in values]
    table = stats.grad_table([None if g is None else tf.constant(g) for g in grads], rollup)
    expected = np_grad_table(layout.scopes, layout.variable_leaf, grads)
    np.testing.assert_allclose(table.numpy(), expected, rtol=1e-5, atol=1e-6, equal_nan=True)


def test_big_and_small_tensors_reduce_alike():
    # Big tensors (>= reductions.BIG elements) are reduced one by one, small ones
    # as one flat vector: both paths, with and without NaN/Inf, and an empty one.
    from tb_gradscope.record._reductions import BIG

    names = ["big/a", "big/b", "small/c", "small/d", "small/empty"]
    layout, rollup = _layout(names)
    rng = np.random.default_rng(9)
    grads = [
        rng.normal(size=(BIG + 7,)).astype(np.float32),
        rng.normal(size=(2, BIG)).astype(np.float32),
        rng.normal(size=(5, 3)).astype(np.float32),
        np.array([0.0, 2.0, -3.0], np.float32),
        np.zeros([0], np.float32),
    ]
    clean = stats.grad_table([tf.constant(g) for g in grads], rollup).numpy()
    assert_table_close(clean, np_grad_table(layout.scopes, layout.variable_leaf, grads), "finite")
    grads[1][0, 5] = np.inf
    grads[3][0] = np.nan
    dirty = stats.grad_table([tf.constant(g) for g in grads], rollup).numpy()
    expected = np_grad_table(layout.scopes, layout.variable_leaf, grads)
    np.testing.assert_allclose(dirty, expected, rtol=1e-5, atol=1e-6, equal_nan=True)


def _op_count(n_variables):
    names = [f"net/block{i // 10}/layer{i}/kernel" for i in range(n_variables)]
    _, rollup = _layout(names)
    specs = [tf.TensorSpec([4, 4]) for _ in range(n_variables)]
    fn = tf.function(lambda *grads: stats.grad_table(list(grads), rollup))
    graph = fn.get_concrete_function(*specs).graph
    return len(graph.get_operations())


def test_graph_grows_by_a_few_ops_per_variable_not_a_cond_each():
    small, large = _op_count(20), _op_count(220)
    assert (large - small) / 200 <= 4, (small, large)  # reshape + input + a share of stacks
