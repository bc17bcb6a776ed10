"""Shared pieces of the TF1 integration tests: the seed programs and a reader.

The seed programs are TF1 code as the seeds write it (`tf` is
`tensorflow.compat.v1`), each built inside its own `tf.Graph` so TF1 tests run
in the same pytest process as TF2 tests (no process-wide
`disable_eager_execution`). The reader goes through TensorBoard's real
multiplexer data provider and decodes with `tb_gradscope.format`.
"""

from __future__ import annotations

import collections
import types

import numpy as np
import tensorflow.compat.v1 as tf
from tensorboard import context

from tb_gradscope import format as fmt
from tests.support.corpus import kit
from tests.support.providers import EXPERIMENT, python_provider

Record = collections.namedtuple("Record", "step value")


def read_records(logdir: str) -> dict[tuple[str, str], list[Record]]:
    """{(kind, name): [Record(step, Table or list of JSON documents)]} of one run."""
    data = python_provider(logdir, {fmt.PLUGIN_NAME: 0})
    ctx = context.RequestContext()
    out: dict[tuple[str, str], list[Record]] = {}
    listed = data.list_tensors(ctx, experiment_id=EXPERIMENT, plugin_name=fmt.PLUGIN_NAME)
    read = data.read_tensors(
        ctx, experiment_id=EXPERIMENT, plugin_name=fmt.PLUGIN_NAME, downsample=100000
    )
    assert len(listed) <= 1, f"expected one run, got {sorted(listed)}"
    for run, tags in listed.items():
        for tag, series in tags.items():
            info = fmt.parse_plugin_content(series.plugin_content)
            out[(info.kind.value, info.name)] = [
                Record(d.step, fmt.decode_table(info, d.numpy)) for d in read[run][tag]
            ]
    blobs = data.list_blob_sequences(ctx, experiment_id=EXPERIMENT, plugin_name=fmt.PLUGIN_NAME)
    for run, tags in blobs.items():
        values = data.read_blob_sequences(
            ctx, experiment_id=EXPERIMENT, plugin_name=fmt.PLUGIN_NAME, downsample=100000
        )
        for tag, series in tags.items():
            info = fmt.parse_plugin_content(series.plugin_content)
            out[(info.kind.value, info.name)] = [
                Record(
                    d.step,
                    fmt.decode_blobs(
                        info, [data.read_blob(ctx, blob_key=r.blob_key) for r in d.values]
                    ),
                )
                for d in values[run][tag]
            ]
    return out


def multihead_seed(lr: float = 0.01) -> types.SimpleNamespace:
    """Seed 01's multi-head `Agent` with two losses trained through var_list
    (`kit.tf1_agent`: the seed's code, its own sizes and var_lists)."""
    return kit.tf1_agent(seed=1, n1=50, input_dim=100, lr=lr, loss2_var_list="layer1+head")


def multihead_feed(m: types.SimpleNamespace, rng: np.random.Generator, batch: int = 16) -> dict:
    x = rng.normal(size=(batch, 100)).astype(np.float32)
    return {m.X: x, m.Y1: x[:, :1] * 2.0, m.Y2: -x[:, 1:2]}


def dqn_seed(n_features: int = 4, n_actions: int = 3, lr: float = 0.01) -> types.SimpleNamespace:
    """Seed 01's DQN, second form: q_target from the target net behind stop_gradient.

    eval_net is trained by RMSProp on the TD error; target_net is replaced by
    eval_net with `target_replace_op` every few learn steps (by the loop).
    """
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(2)
        gamma = 0.9
        s = tf.placeholder(tf.float32, [None, n_features], name="s")
        s_ = tf.placeholder(tf.float32, [None, n_features], name="s_")
        r = tf.placeholder(
            tf.float32,
            [
                None,
            ],
            name="r",
        )
        a = tf.placeholder(
            tf.int32,
            [
                None,
            ],
            name="a",
        )

        with tf.variable_scope("eval_net"):
            e1 = _dense(s, 20, "e1", tf.nn.relu)
            q_eval = _dense(e1, n_actions, "q")
        with tf.variable_scope("target_net"):
            t1 = _dense(s_, 20, "t1", tf.nn.relu)
            q_next = _dense(t1, n_actions, "t2")

        with tf.variable_scope("q_target"):
            q_target = r + gamma * tf.reduce_max(q_next, axis=1, name="Qmax_s_")
            q_target = tf.stop_gradient(q_target)
        with tf.variable_scope("q_eval"):
            a_indices = tf.stack([tf.range(tf.shape(a)[0], dtype=tf.int32), a], axis=1)
            q_eval_wrt_a = tf.gather_nd(params=q_eval, indices=a_indices)
        with tf.variable_scope("loss"):
            loss = tf.reduce_mean(tf.squared_difference(q_target, q_eval_wrt_a, name="TD_error"))
        with tf.variable_scope("train"):
            _train_op = tf.train.RMSPropOptimizer(lr).minimize(loss)

        t_params = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="target_net")
        e_params = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="eval_net")
        with tf.variable_scope("hard_replacement"):
            target_replace_op = [tf.assign(t, e) for t, e in zip(t_params, e_params)]
    return types.SimpleNamespace(**locals())


def dqn_feed(m: types.SimpleNamespace, rng: np.random.Generator, batch: int = 32) -> dict:
    return {
        m.s: rng.normal(size=(batch, 4)).astype(np.float32),
        m.s_: rng.normal(size=(batch, 4)).astype(np.float32),
        m.r: rng.normal(size=(batch,)).astype(np.float32),
        m.a: rng.integers(0, 3, size=(batch,)).astype(np.int32),
    }


def ddpg_seed(s_dim: int = 3, a_dim: int = 2) -> types.SimpleNamespace:
    """A DDPG actor-critic in TF1 style: the actor is trained with
    tf.gradients(a, actor_params, grad_ys=dq/da), the critic on a TD loss."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(3)
        S = tf.placeholder(tf.float32, [None, s_dim], "s")
        R = tf.placeholder(tf.float32, [None, 1], "r")
        with tf.variable_scope("Actor"):
            with tf.variable_scope("eval_net"):
                net = _dense(S, 30, "l1", tf.nn.relu)
                a = _dense(net, a_dim, "a", tf.nn.tanh)
        with tf.variable_scope("Critic"):
            with tf.variable_scope("eval_net"):
                net = _dense(tf.concat([S, a], axis=1), 30, "l1", tf.nn.relu)
                q = _dense(net, 1, "q")
        actor_params = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="Actor/eval_net")
        critic_params = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="Critic/eval_net")
        with tf.variable_scope("C_train"):
            td_loss = tf.reduce_mean(tf.squared_difference(R, q))
            train_critic = tf.train.AdamOptimizer(0.01).minimize(td_loss, var_list=critic_params)
        with tf.variable_scope("a_grad"):
            a_grads = tf.gradients(q, a)[0]
        with tf.variable_scope("policy_grads"):
            policy_grads = tf.gradients(ys=a, xs=actor_params, grad_ys=a_grads)
        with tf.variable_scope("A_train"):
            train_actor = tf.train.AdamOptimizer(-0.001).apply_gradients(
                zip(policy_grads, actor_params)
            )
    return types.SimpleNamespace(**locals())


def _dense(x, units: int, name: str, activation=None):
    """A dense layer from tf.get_variable, as the seeds write them."""
    with tf.variable_scope(name):
        w = tf.get_variable(
            "w", [int(x.shape[-1]), units], initializer=tf.random_normal_initializer(0.0, 0.3)
        )
        b = tf.get_variable("b", [1, units], initializer=tf.constant_initializer(0.1))
        y = tf.matmul(x, w) + b
    return activation(y) if activation else y


def dqn3_seed(n_features: int = 4, n_actions: int = 3, batch: int = 8) -> types.SimpleNamespace:
    """Seed 02 in TF1: the gradient starts at the network's output q_all with
    output gradients -targets (targets[i][a_i] = clipped delta_i), as DQN 3.0's
    `network:backward(s, targets)` does; target_network only makes the targets."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(4)
        s = tf.placeholder(tf.float32, [batch, n_features], "s")
        s2 = tf.placeholder(tf.float32, [batch, n_features], "s2")
        a = tf.placeholder(tf.int32, [batch], "a")
        r = tf.placeholder(tf.float32, [batch], "r")
        with tf.variable_scope("network"):
            q_all = _dense(_dense(s, 16, "l1", tf.nn.relu), n_actions, "out")
        with tf.variable_scope("target_network"):
            q2_all = _dense(_dense(s2, 16, "l1", tf.nn.relu), n_actions, "out")
        q2_max = tf.reduce_max(q2_all, axis=1)
        q = tf.reduce_sum(q_all * tf.one_hot(a, n_actions), axis=1)
        delta = tf.clip_by_value(r + 0.99 * q2_max - q, -1.0, 1.0)
        targets = tf.stop_gradient(tf.one_hot(a, n_actions) * delta[:, None])
        params = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="network")
        grads = tf.gradients(q_all, params, grad_ys=-targets)
        train = tf.train.RMSPropOptimizer(0.00025).apply_gradients(zip(grads, params))
    return types.SimpleNamespace(**locals())
