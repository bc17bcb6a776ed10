"""The recorder's trace grows linearly with the number of variables, by a few ops each.

A 10,000-variable model must trace in time proportional to its size: the ops the
recorder adds to a step (at top level and inside its recorded-step branches)
are counted for n and 2n variables against the same step unrecorded. No op the
recorder's kernels build takes one input per variable: TF's graph optimizer is
superlinear in an op's inputs, so concatenations are trees of bounded fan-in,
with the same values as one concat.
"""

from __future__ import annotations

import collections

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import scopes as scopes_lib
from tb_gradscope.record import Recorder
from tb_gradscope.record import _conflict as conflict
from tb_gradscope.record import _drift as drift
from tb_gradscope.record import _reductions as reductions
from tb_gradscope.record import _stats as stats


def _variables(n: int) -> list[tf.Variable]:
    """Half kernels ([3, 2]), half biases ([2]), ten to a leaf scope."""
    rng = np.random.default_rng(n)
    shapes = [(3, 2) if i % 2 == 0 else (2,) for i in range(n)]
    return [
        tf.Variable(rng.normal(size=s).astype(np.float32), name=f"m/g{i // 10}/v{i}")
        for i, s in enumerate(shapes)
    ]


def _all_nodes(fn: tf.types.experimental.PolymorphicFunction) -> list:
    """NodeDefs of the traced step and of every function it calls (branches)."""
    graph_def = fn.get_concrete_function().graph.as_graph_def()
    return list(graph_def.node) + [node for f in graph_def.library.function for node in f.node_def]


def _graph_nodes(fn: tf.types.experimental.PolymorphicFunction) -> int:
    return len(_all_nodes(fn))


def _steps(n: int, logdir):
    """(plain step, recorded step, recorder) over n variables, every second step recorded."""
    variables = _variables(n)

    def loss():
        return tf.add_n([tf.reduce_sum(tf.square(v)) for v in variables])

    plain_opt, recorded_opt = keras.optimizers.SGD(0.1), keras.optimizers.SGD(0.1)
    plain_opt.build(variables)
    recorded_opt.build(variables)
    rec = Recorder(logdir=str(logdir / str(n)), every_n_steps=2, variables=variables)

    @tf.function
    def plain():
        with tf.GradientTape() as tape:
            value = loss()
        plain_opt.apply_gradients(zip(tape.gradient(value, variables), variables))

    @tf.function
    def recorded():
        with rec.tape() as tape:
            value = loss()
        rec.apply(recorded_opt, rec.gradients(tape, {"loss": value}, variables))

    return plain, recorded, rec


def _added_nodes(n: int, logdir) -> int:
    plain, recorded, rec = _steps(n, logdir)
    try:
        return _graph_nodes(recorded) - _graph_nodes(plain)
    finally:
        rec.close()


def _wide_ops(fn, bound: int) -> collections.Counter:
    """Op types with more than `bound` data inputs, counted."""
    return collections.Counter(
        node.op for node in _all_nodes(fn) if sum(not i.startswith("^") for i in node.input) > bound
    )


def test_recorder_adds_a_few_ops_per_variable_and_grows_linearly(tmp_path):
    small, large = _added_nodes(40, tmp_path), _added_nodes(80, tmp_path)
    per_variable = (large - small) / 40
    assert large <= 2.1 * small, (small, large)
    # reads for the snapshot and the update table, a reshape per kernel, the
    # recorded branch's inputs and outputs: 7.5 today, 13 before reshapes shared one
    # shape and the snapshot dropped its identities
    assert per_variable <= 9, (small, large, per_variable)


@pytest.mark.slow
def test_no_op_of_the_recorders_kernels_takes_one_input_per_variable(tmp_path, monkeypatch):
    monkeypatch.setattr(reductions, "FAN_IN", 8)
    plain, recorded, rec = _steps(300, tmp_path)
    try:
        added = _wide_ops(recorded, 8 + 1) - _wide_ops(plain, 8 + 1)  # + 1: a concat's axis
    finally:
        rec.close()
    # What is left is tf.cond's (cond_v2): one input per tensor a branch captures.
    assert set(added) == {"If"}, added


def test_concat_joins_in_order_with_at_most_fan_in_inputs_per_op():
    parts = [tf.constant(np.arange(i, 2 * i + 1, dtype=np.float32)) for i in range(23)]
    graph = tf.Graph()
    with graph.as_default():
        reductions.concat([tf.constant(p) for p in parts], fan_in=4)
    concats = [op for op in graph.get_operations() if op.type == "ConcatV2"]
    assert max(len(op.inputs) - 1 for op in concats) <= 4
    assert len(concats) == 6 + 2 + 1  # 23 parts -> 6 -> 2 -> 1
    np.testing.assert_array_equal(
        reductions.concat(parts, fan_in=4).numpy(), tf.concat(parts, 0).numpy()
    )
    with graph.as_default():
        reductions.concat([tf.constant(p) for p in parts[:4]], fan_in=4)
    assert len([op for op in graph.get_operations() if op.type == "ConcatV2"]) == len(concats) + 1
    assert reductions.concat(parts[:1]) is parts[0]


def test_stack_with_bounded_fan_in_equals_one_stack():
    scalars = [tf.constant(float(i)) for i in range(11)]
    np.testing.assert_array_equal(
        reductions.stack(scalars, fan_in=3).numpy(), tf.stack(scalars).numpy()
    )


@pytest.mark.parametrize("fan_in", [1, 0])
def test_a_fan_in_below_two_is_refused_by_name(fan_in):
    with pytest.raises(ValueError, match="fan_in must be at least 2"):
        reductions.concat([tf.zeros([1])] * 3, fan_in=fan_in)


def _kernel_tables() -> list[np.ndarray]:
    """Every table kernel over 40 variables (some without gradient, some NaN, a
    sparse one), as numpy, at the current FAN_IN."""
    rng = np.random.default_rng(7)
    variables = _variables(40)
    names = [v.name.split(":")[0] for v in variables]
    layout = scopes_lib.build_layout(names, scopes_lib.ScopeSpec(mapping=scopes_lib.leaf_scope))
    rollup = stats.RollUp.from_layout(layout)
    grads_a = [tf.constant(rng.normal(size=v.shape).astype(np.float32)) for v in variables]
    grads_a[3] = None
    grads_a[4] = tf.IndexedSlices(
        tf.constant(rng.normal(size=(2, 2)).astype(np.float32)),
        tf.constant([0, 0]),
        tf.constant([3, 2]),
    )
    grads_b = [
        tf.constant(rng.normal(size=v.shape).astype(np.float32)) if i % 3 else None
        for i, v in enumerate(variables)
    ]
    grads_b[7] = tf.fill(variables[7].shape, np.float32(np.nan))
    before = [
        tf.constant(v.numpy() + rng.normal(size=v.shape).astype(np.float32)) if i % 4 else None
        for i, v in enumerate(variables)
    ]
    target = variables[:20]
    online = [tf.Variable(v.numpy() * 2) for v in target]
    rows = drift.RowLayout.of(target)
    return [
        stats.grad_table(grads_a, rollup).numpy(),
        stats.grad_table(grads_b, rollup).numpy(),
        stats.update_table(before, variables, rollup).numpy(),
        stats.update_table(
            [b if b is not None else tf.constant(v.numpy()) for b, v in zip(before, variables)],
            variables,
            rollup,
        ).numpy(),
        conflict.scope_grams({"a": grads_a, "b": grads_b}, rollup).numpy(),
        drift.sides_now(target, online, rows, tf.float32).numpy(),
        rows.pad(drift.flatten(online)).numpy(),
    ]


def test_tables_are_bitwise_those_of_one_concat(monkeypatch):
    one_concat = _kernel_tables()  # 40 variables: fewer than FAN_IN, one concat each
    monkeypatch.setattr(reductions, "FAN_IN", 3)
    tree = _kernel_tables()
    for i, (want, got) in enumerate(zip(one_concat, tree)):
        assert want.dtype == got.dtype and want.shape == got.shape, i
        assert want.tobytes() == got.tobytes(), f"kernel {i} differs with a tree of concats"
