"""The seed scenarios rebuilt as small models for the analysis tests.

Each builder returns what `analyze_graph` needs. Lines that create a cutting
op carry a `# CUT:<tag>` marker so tests can assert the exact source line.
"""

from __future__ import annotations

import dataclasses
import pathlib
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.scopes import leaf_scope

v1 = tf.compat.v1


def marker_line(tag: str) -> int:
    """The line number of `# CUT:<tag>` in this file."""
    for i, line in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1):
        if line.rstrip().endswith(f"# CUT:{tag}"):
            return i
    raise LookupError(f"no '# CUT:{tag}' marker in {__file__}")


@dataclasses.dataclass
class Built:
    graph: Any
    losses: dict
    variable_scopes: list
    train_ops: dict | None = None
    extra: dict = dataclasses.field(default_factory=dict)


def _tf1_scopes(graph: tf.Graph) -> list:
    with graph.as_default():
        return [
            (v, leaf_scope(v.name))
            for v in v1.global_variables()
            if "Adam" not in v.name and "power" not in v.name and "RMSProp" not in v.name
        ]


def seed01_multihead() -> Built:
    """Seed 01: Agent/layer1 shared by two heads, each trained with its own var_list."""
    graph = tf.Graph()
    with graph.as_default():
        x = v1.placeholder(tf.float32, [None, 10], "X")
        y1 = v1.placeholder(tf.float32, [None, 1], "Y1")
        y2 = v1.placeholder(tf.float32, [None, 1], "Y2")
        with v1.variable_scope("Agent"):
            with v1.variable_scope("layer1"):
                w1 = v1.get_variable("w1", [10, 8])
                b1 = v1.get_variable("b1", [1, 8])
                s = tf.matmul(x, w1) + b1
            with v1.variable_scope("layer2_1"):
                w21 = v1.get_variable("w21", [8, 1])
                b21 = v1.get_variable("b21", [1, 1])
                out1 = tf.matmul(s, w21) + b21
            with v1.variable_scope("layer2_2"):
                w22 = v1.get_variable("w22", [8, 1])
                b22 = v1.get_variable("b22", [1, 1])
                out2 = tf.matmul(s, w22) + b22
        loss1 = v1.losses.mean_squared_error(labels=y1, predictions=out1)
        loss2 = v1.losses.mean_squared_error(labels=y2, predictions=out2)
        layer1 = v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, scope="Agent/layer1")
        layer21 = v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, scope="Agent/layer2_1")
        layer22 = v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, scope="Agent/layer2_2")
        scopes = [(v, leaf_scope(v.name)) for v in layer1 + layer21 + layer22]
        train1 = v1.train.AdamOptimizer(0.01).minimize(loss1, var_list=layer1 + layer21)
        train2 = v1.train.AdamOptimizer(0.01).minimize(loss2, var_list=layer1 + layer22)
    return Built(
        graph, {"loss1": loss1, "loss2": loss2}, scopes, {"loss1": train1, "loss2": train2}
    )


def _tf1_net(x, scope: str):
    with v1.variable_scope(scope):
        w = v1.get_variable("w", [4, 3])
        b = v1.get_variable("b", [3])
        return tf.matmul(x, w) + b


def seed01_dqn_tf1(variant: str) -> Built:
    """Seed 01 DQN in TF1. variant: stop_gradient | placeholder | leak | var_list."""
    graph = tf.Graph()
    with graph.as_default():
        s = v1.placeholder(tf.float32, [None, 4], "s")
        s_ = v1.placeholder(tf.float32, [None, 4], "s_")
        r = v1.placeholder(tf.float32, [None], "r")
        a = v1.placeholder(tf.int32, [None], "a")
        q_eval = _tf1_net(s, "eval_net")
        q_next = _tf1_net(s_, "target_net")
        with v1.variable_scope("q_target"):
            if variant == "placeholder":
                q_target = v1.placeholder(tf.float32, [None], "Q_target")
            else:
                q_target = r + 0.9 * tf.reduce_max(q_next, axis=1, name="Qmax_s_")
                if variant == "stop_gradient":
                    q_target = tf.stop_gradient(q_target)  # CUT:tf1_dqn
        q_eval_wrt_a = tf.gather(q_eval, a, axis=1, batch_dims=1)
        with v1.variable_scope("loss"):
            loss = tf.reduce_mean(
                tf.math.squared_difference(q_target, q_eval_wrt_a, name="TD_error")
            )
        eval_vars = v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, scope="eval_net")
        var_list = eval_vars if variant == "var_list" else None
        train = v1.train.RMSPropOptimizer(0.01).minimize(loss, var_list=var_list)
    return Built(graph, {"td": loss}, _tf1_scopes(graph), {"td": train})


class Net(tf.Module):
    """A two-layer Q network made of tf.Variables, scoped by module name."""

    def __init__(self, name: str, seed: int):
        super().__init__(name=name)
        rng = np.random.default_rng(seed)
        self.w1 = tf.Variable(rng.normal(size=(4, 8)).astype("float32"), name="l1/kernel")
        self.w2 = tf.Variable(rng.normal(size=(8, 3)).astype("float32"), name="l2/kernel")

    def __call__(self, x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, self.w1)), self.w2)

    def scopes(self) -> list:
        return [(self.w1, f"{self.name}/l1"), (self.w2, f"{self.name}/l2")]


def seed01_dqn_tf2(with_optimizer: bool = True) -> Built:
    """Seed 01 DQN in TF2: a tf.function step with stop_gradient on the TD target."""
    online, target = Net("eval_net", 0), Net("target_net", 1)
    opt = tf.keras.optimizers.SGD(0.1)
    variables = [online.w1, online.w2]
    if with_optimizer:
        opt.build(variables)

    @tf.function
    def step(s, a, r, s_):
        with tf.GradientTape() as tape:
            q_next = target(s_)
            q_target = tf.stop_gradient(r + 0.9 * tf.reduce_max(q_next, axis=1))  # CUT:tf2_dqn
            q = tf.gather(online(s), a, axis=1, batch_dims=1)
            loss = tf.reduce_mean(tf.square(q_target - q))
        if with_optimizer:
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            for t, o in ((target.w1, online.w1), (target.w2, online.w2)):
                t.assign(o)  # a hard copy: written, but not from the gradient
        return {"td": loss}

    spec = tf.TensorSpec([None, 4])
    cf = step.get_concrete_function(
        spec, tf.TensorSpec([None], tf.int32), tf.TensorSpec([None]), spec
    )
    return Built(
        cf.graph,
        {"td": cf.structured_outputs["td"]},
        online.scopes() + target.scopes(),
        extra={"step": step, "online": online, "target": target},
    )


@dataclasses.dataclass
class StartPoint:
    """Duck-typed like the recorder's StartPoint: a tensor and its output gradients."""

    tensor: Any
    output_gradients: Any


def seed02_start_point() -> Built:
    """Seed 02: the gradient starts at the Q output with explicit output gradients."""
    online, target = Net("network", 0), Net("target_network", 1)

    @tf.function
    def step(s, s2, a, r):
        q_all = online(s)
        q2_max = tf.reduce_max(target(s2), axis=1)
        delta = r + 0.99 * q2_max - tf.gather(q_all, a, axis=1, batch_dims=1)
        targets = tf.one_hot(a, 3) * delta[:, None]
        return {"q": q_all, "targets": targets}

    spec = tf.TensorSpec([None, 4])
    cf = step.get_concrete_function(
        spec, spec, tf.TensorSpec([None], tf.int32), tf.TensorSpec([None])
    )
    out = cf.structured_outputs
    return Built(
        cf.graph,
        {"q_update": StartPoint(out["q"], out["targets"])},
        online.scopes() + target.scopes(),
    )


def seed03_ema_lstm() -> Built:
    """Seed 03: a Keras LSTM online net and an EMA target LSTM, in one traced step."""
    import keras

    def make(name):
        return keras.Sequential(
            [
                keras.Input((5, 3)),
                keras.layers.LSTM(4, name="lstm"),
                keras.layers.Dense(2, name="head"),
            ],
            name=name,
        )

    online, target = make("online"), make("target")
    opt = keras.optimizers.Adam(0.01)
    opt.build(online.trainable_variables)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            pred = online(x)
            anchor = tf.stop_gradient(target(x))  # CUT:lstm_target
            loss = tf.reduce_mean(tf.square(pred - y)) + 0.1 * tf.reduce_mean(
                tf.square(pred - anchor)
            )
        grads = tape.gradient(loss, online.trainable_variables)
        opt.apply_gradients(zip(grads, online.trainable_variables))
        for t, o in zip(target.variables, online.variables):
            t.assign(0.99 * t + 0.01 * o)
        return {"loss": loss}

    cf = step.get_concrete_function(tf.TensorSpec([None, 5, 3]), tf.TensorSpec([None, 2]))
    scopes = [(v, leaf_scope(v.path)) for m in (online, target) for v in m.variables]
    return Built(cf.graph, {"loss": cf.structured_outputs["loss"]}, scopes)


def actor_critic() -> Built:
    """DDPG-style step: the actor's loss flows through the critic, but only the
    actor's optimizer applies it; the critic has its own loss and optimizer."""
    rng = np.random.default_rng(3)
    actor = tf.Variable(rng.normal(size=(4, 2)).astype("float32"), name="actor/kernel")
    critic = tf.Variable(rng.normal(size=(6, 1)).astype("float32"), name="critic/kernel")
    actor_opt, critic_opt = tf.keras.optimizers.Adam(0.01), tf.keras.optimizers.Adam(0.01)
    actor_opt.build([actor])
    critic_opt.build([critic])

    def q(s, a):
        return tf.concat([s, a], axis=1) @ critic

    @tf.function
    def step(s, a, y):
        with tf.GradientTape() as tape:
            actor_loss = -tf.reduce_mean(q(s, tf.tanh(s @ actor)))
        actor_opt.apply_gradients([(tape.gradient(actor_loss, actor), actor)])
        with tf.GradientTape() as tape:
            critic_loss = tf.reduce_mean(tf.square(q(s, a) - y))
        critic_opt.apply_gradients([(tape.gradient(critic_loss, critic), critic)])
        return {"actor": actor_loss, "critic": critic_loss}

    cf = step.get_concrete_function(
        tf.TensorSpec([None, 4]), tf.TensorSpec([None, 2]), tf.TensorSpec([None, 1])
    )
    out = cf.structured_outputs
    return Built(
        cf.graph,
        {"actor": out["actor"], "critic": out["critic"]},
        [(actor, "actor"), (critic, "critic")],
    )
