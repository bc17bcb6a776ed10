"""A recorded step reads the gradient its train op already computes, exactly
where that gradient is provably the recorder's own; anything the user did to
it (clipping, a sum of losses, a stateful op) keeps the recorder's gradient."""

from __future__ import annotations

import numpy as np
import tensorflow.compat.v1 as tf

from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.integrations.tf1._reuse import applied_gradients, same_value
from tb_gradscope.record._stats import RollUp, grad_table
from tests.support.tf1_support import multihead_feed, multihead_seed


def _own_table(gs: GraphRecorder, loss: tf.Tensor) -> tf.Tensor:
    """The table from the recorder's own `tf.gradients`, as it was built before reuse."""
    with gs.graph.as_default():
        return grad_table(tf.gradients(loss, gs.variables), RollUp.from_layout(gs.layout))


def _names(variables) -> frozenset:
    return frozenset(v.name for v in variables)


def test_minimize_gradients_are_reused_and_the_tables_are_bitwise_the_recomputed_ones(tmp_path):
    m = multihead_seed()
    with m.graph.as_default():
        gs = GraphRecorder(
            str(tmp_path),
            losses={"loss1": m.loss1, "loss2": m.loss2},
            train_ops={"loss1": m.train1, "loss2": m.train2},
        )
        assert gs._loss_ops["loss1"].reused == _names(m.layer1_params + m.layer21_params)
        assert gs._loss_ops["loss2"].reused == _names(m.layer1_params + m.layer22_params)
        own = {
            name: _own_table(gs, loss) for name, loss in (("loss1", m.loss1), ("loss2", m.loss2))
        }
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            rng = np.random.default_rng(0)
            for _ in range(3):
                for name, train in (("loss1", m.train1), ("loss2", m.train2)):
                    _, (reused, recomputed) = sess.run(
                        (train, [gs._loss_ops[name].table, own[name]]), multihead_feed(m, rng)
                    )
                    assert reused.tobytes() == recomputed.tobytes()
        gs.close()


def _clipped_graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.constant(np.random.default_rng(1).normal(size=(8, 3)).astype(np.float32))
        w = tf.get_variable("w", [3, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) - 1.0))
        opt = tf.train.GradientDescentOptimizer(0.1)
        ((grad, var),) = opt.compute_gradients(loss, [w])
        clipped = opt.apply_gradients([(tf.clip_by_norm(grad, 1e-3), var)])
        plain = opt.apply_gradients([(grad, var)])
        both = tf.train.GradientDescentOptimizer(0.1).minimize(
            loss + tf.reduce_sum(w), var_list=[w]
        )
    return graph, w, loss, clipped, plain, both


def test_a_clipped_gradient_is_not_reused_and_the_raw_gradient_is_recorded(tmp_path):
    graph, w, loss, clipped, plain, _ = _clipped_graph()
    with graph.as_default():
        gs = GraphRecorder(
            str(tmp_path / "clipped"), losses={"mse": loss}, train_ops={"mse": clipped}
        )
        assert gs._loss_ops["mse"].reused == frozenset()
        unclipped = GraphRecorder(
            str(tmp_path / "plain"), losses={"mse": loss}, train_ops={"mse": plain}
        )
        assert unclipped._loss_ops["mse"].reused == _names([w])
        with tf.Session() as sess:
            sess.run(tf.global_variables_initializer())
            a, b = sess.run([gs._loss_ops["mse"].table, unclipped._loss_ops["mse"].table])
        assert a.tobytes() == b.tobytes() and a[0, 1] > 1e-3  # the norm before clipping
        gs.close()
        unclipped.close()


def test_the_train_op_of_another_loss_is_not_reused(tmp_path):
    graph, w, loss, _, _, both = _clipped_graph()
    with graph.as_default():
        gs = GraphRecorder(str(tmp_path), losses={"mse": loss}, train_ops={"mse": both})
        assert gs._loss_ops["mse"].reused == frozenset()
        gs.close()


def test_same_value_needs_the_same_stateless_ops_on_shared_inputs():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.placeholder(tf.float32, [4, 4])
        assert same_value(tf.matmul(x, x) * 2.0, tf.identity(tf.matmul(x, x) * 2.0))
        assert not same_value(tf.matmul(x, x), tf.matmul(x, x, transpose_a=True))
        assert not same_value(x * 2.0, x * 3.0)
        assert not same_value(
            x + tf.random.uniform([4, 4], seed=1), x + tf.random.uniform([4, 4], seed=1)
        )
        ref = tf.Variable(tf.zeros([4, 4]), use_resource=False)
        assert not same_value(
            tf.identity(ref) * 2.0, tf.identity(ref) * 2.0
        )  # two reads may differ
        res = tf.Variable(tf.zeros([4, 4]), use_resource=True)
        assert not same_value(res.read_value() * 2.0, res.read_value() * 2.0)


def test_same_value_refuses_what_a_cond_computes():
    graph = tf.Graph()
    with graph.as_default():
        p = tf.placeholder(tf.bool, [])
        two = tf.constant(2.0)
        inside = tf.cond(p, lambda: two * 2.0, lambda: two * 2.0)
        assert not same_value(inside, two * 2.0)
        assert same_value(two * 2.0, two * 2.0)


def test_a_variable_updated_by_two_apply_ops_is_not_reused():
    graph = tf.Graph()
    with graph.as_default():
        w = tf.get_variable("w", [2])
        loss = tf.reduce_sum(tf.square(w))
        twice = tf.group(
            tf.train.GradientDescentOptimizer(0.1).minimize(loss),
            tf.train.GradientDescentOptimizer(0.2).minimize(loss),
        )
        assert w.op not in applied_gradients(twice)
        assert w.op in applied_gradients(tf.train.GradientDescentOptimizer(0.1).minimize(loss))


def test_a_sparse_update_is_not_reused(tmp_path):
    graph = tf.Graph()
    with graph.as_default():
        emb = tf.get_variable("emb", [10, 3])
        w = tf.get_variable("w", [3, 1])
        rows = tf.nn.embedding_lookup(emb, tf.constant([1, 4, 4]))
        loss = tf.reduce_mean(tf.square(tf.matmul(rows, w)))
        train = tf.train.AdagradOptimizer(0.1).minimize(loss)  # a ResourceSparseApplyAdagrad
        assert any(op.type.startswith("ResourceSparseApply") for op in graph.get_operations())
        gs = GraphRecorder(str(tmp_path), losses={"fit": loss}, train_ops={"fit": train})
        assert gs._loss_ops["fit"].reused == _names([w])
        gs.close()
