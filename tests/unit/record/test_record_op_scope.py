"""The recorder's ops sit under `tb_gradscope/<part>/` in the user's graph.

A user who opens TensorBoard's Graphs tab on a recorded step finds the
recorder's share of it in one node apart from the model, and
`bench.bench_ops` splits the ops a recorded step adds by part. These tests
trace the README loop with `rec.function` and read the variants' graphs.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.pairs import pair_models
from tb_gradscope.record import Recorder
from tb_gradscope.record import _op_scope as op_scope
from tb_gradscope.record._step_function import PLAIN, RECORDED


def _names(concrete) -> list[str]:
    """Every op name of a concrete function, branch functions by their own name."""
    graph_def = concrete.graph.as_graph_def()
    names = [n.name for n in graph_def.node]
    for function in graph_def.library.function:
        names.extend(f"{function.signature.name}:{n.name}" for n in function.node_def)
    return names


def _ours(names: list[str]) -> list[str]:
    return [n for n in names if n.startswith(op_scope.OP_SCOPE)]


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict[str, list[str]]:
    """{variant: op names} of a `rec.function` DQN step with a pair and a rule."""
    keras.utils.set_random_seed(0)

    def net(name):
        return keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(8, name="l1"), keras.layers.Dense(2, name="l2")],
            name=name,
        )

    online, target = net("online"), net("target")
    target.set_weights(online.get_weights())
    optimizer = keras.optimizers.Adam(1e-3)
    rec = Recorder(
        logdir=str(tmp_path_factory.mktemp("op_scope")),
        every_n_steps=2,
        models={"online": online, "target": target},
        pairs=[pair_models(target, online)],
        rules=["never(td, target/*)"],
    )

    @rec.function
    def step(x):
        with tf.name_scope("users_scope"), rec.tape() as tape:
            loss = tf.reduce_mean(tf.square(online(x) - tf.stop_gradient(target(x))))
        rec.apply(optimizer, rec.gradients(tape, {"td": loss}, online.trainable_variables))
        rec.record_drift()

    x = tf.constant(np.ones((4, 4), "float32"))
    step(x)
    out = {
        mode: _names(step._variants[mode].get_concrete_function(x)) for mode in (PLAIN, RECORDED)
    }
    rec.close()
    return out


def test_the_plain_variant_holds_no_recorder_op(variants):
    assert _ours(variants[PLAIN]) == []


@pytest.mark.parametrize("part", ["grad_stats", "update_stats", "drift", "rules", "write", "step"])
def test_each_part_of_a_recorded_step_has_its_own_scope(variants, part):
    assert any(n.startswith(f"{op_scope.OP_SCOPE}/{part}/") for n in variants[RECORDED])


def test_recorder_ops_leave_the_users_scope_and_names_alone(variants):
    recorded = variants[RECORDED]
    assert not any("users_scope/" in n and op_scope.OP_SCOPE in n for n in recorded)
    # The user's own ops are named as in the plain variant (not the captured
    # variable handles: a graph names each after the op that captured it first).
    users = {
        n for n in variants[PLAIN] if n.startswith("users_scope/") and not n.endswith("/resource")
    }
    assert users and users <= set(recorded)


def test_a_kernel_inside_another_keeps_the_outer_scope():
    @op_scope.kernel("inner")
    def inner():
        return tf.constant(1.0, name="c")

    @op_scope.kernel("outer")
    def outer():
        return inner()

    with tf.Graph().as_default():
        assert outer().op.name == f"{op_scope.OP_SCOPE}/outer/c"
        with tf.name_scope(f"{op_scope.OP_SCOPE}/grads"):  # the TF1 integration's scopes
            assert inner().op.name == f"{op_scope.OP_SCOPE}/grads/c"
