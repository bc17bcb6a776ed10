"""Demo `dqn_tf1`: seed 01's TF1 DQN (variable_scope, placeholders, Session), three ways.

`eval_net` and `target_net` are built with `tf.compat.v1.get_variable` under
variable scopes, as the seed writes them, and trained by RMSProp on CartPole
with a hard replacement of target_net every `SYNC_EVERY` learn steps. Twins:

- clean: the seed's second form, `q_target = tf.stop_gradient(r + gamma *
  max q_next)` computed in the graph: target_net is `blocked` for the TD loss.
- placeholder: the seed's first form, q_target computed by a first
  `sess.run` and fed back through a placeholder: target_net is `independent`.
- leaky: the second form without stop_gradient and `minimize(loss)` over every
  trainable variable: the TD loss trains target_net.

Recorded with `tb_gradscope.integrations.tf1.GraphRecorder` through a wrapped
Session.
"""

from __future__ import annotations

import types

import numpy as np
import tensorflow as tf

from tb_gradscope.demos import common, envs
from tb_gradscope.demos.replay import ReplayBuffer
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec
from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.pairs import pair_prefixes

v1 = tf.compat.v1

PLACEHOLDER = "placeholder"
GAMMA = 0.9
LR = 0.005
BATCH = 32
SYNC_EVERY = 25
WARMUP = 64
HIDDEN = 20

RULES = (
    "never(td, target_net/*)",
    "only(td, eval_net/*)",
    f"tracks(target_net, eval_net, every={SYNC_EVERY})",
)


def _dense(x, units: int, name: str, activation=None):
    """A layer from get_variable, as the seed writes them (scope NAME: w, b)."""
    with v1.variable_scope(name):
        w = v1.get_variable(
            "w", [int(x.shape[-1]), units], initializer=v1.random_normal_initializer(0.0, 0.3)
        )
        b = v1.get_variable("b", [1, units], initializer=v1.constant_initializer(0.1))
        y = tf.matmul(x, w) + b
    return activation(y) if activation else y


def build_graph(twin: str, n_features: int, n_actions: int, seed: int) -> types.SimpleNamespace:
    """The seed's DQN graph for one twin; returns its tensors and ops by name."""
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(seed)
        s = v1.placeholder(tf.float32, [None, n_features], name="s")
        s_ = v1.placeholder(tf.float32, [None, n_features], name="s_")
        r = v1.placeholder(tf.float32, [None], name="r")
        a = v1.placeholder(tf.int32, [None], name="a")
        done = v1.placeholder(tf.float32, [None], name="done")
        with v1.variable_scope("eval_net"):
            q_eval = _dense(_dense(s, HIDDEN, "l1", tf.nn.relu), n_actions, "l2")
        with v1.variable_scope("target_net"):
            q_next = _dense(_dense(s_, HIDDEN, "l1", tf.nn.relu), n_actions, "l2")
        with v1.variable_scope("q_target"):
            if twin == PLACEHOLDER:
                q_target = v1.placeholder(tf.float32, [None], name="Q_target")
            else:
                q_target = r + GAMMA * (1.0 - done) * tf.reduce_max(q_next, axis=1)
                if twin == CLEAN:
                    q_target = tf.stop_gradient(q_target)
        with v1.variable_scope("q_eval"):
            q_eval_wrt_a = tf.gather(q_eval, a, axis=1, batch_dims=1)
        with v1.variable_scope("loss"):
            loss = tf.reduce_mean(v1.squared_difference(q_target, q_eval_wrt_a))
        e_params = v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, scope="eval_net")
        t_params = v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, scope="target_net")
        with v1.variable_scope("train"):
            var_list = None if twin == LEAKY else e_params
            train_op = v1.train.RMSPropOptimizer(LR).minimize(loss, var_list=var_list)
        with v1.variable_scope("hard_replacement"):
            replace_op = [v1.assign(t, e) for t, e in zip(t_params, e_params)]
        init = v1.global_variables_initializer()
    return types.SimpleNamespace(**{k: v for k, v in locals().items() if k != "var_list"})


def train(spec: RunSpec) -> RunResult:
    """Trains one twin in its own graph and Session."""
    if spec.twin not in DEMO.twins:
        raise ValueError(f"dqn_tf1 has twins {DEMO.twins}, not {spec.twin!r}")
    common.seed_everything(spec.seed)
    env = envs.make_cartpole(spec.seed, spec.env)
    m = build_graph(spec.twin, env.observation_size, env.num_actions, spec.seed)
    with m.graph.as_default():
        pair = pair_prefixes(v1.trainable_variables(), "target_net", "eval_net", every=SYNC_EVERY)
        gs = GraphRecorder(
            spec.run_dir,
            losses={"td": m.loss},
            train_ops={"td": m.train_op},
            every_n_steps=spec.record_every,
            pairs=[pair],
        )
        with gs.wrap(v1.Session(graph=m.graph)) as sess:
            sess.run(m.init)
            sess.run(m.replace_op)
            td = _learn(spec, env, m, sess)
    return RunResult({"td": td}, env.name)


def _learn(spec: RunSpec, env: envs.Env, m: types.SimpleNamespace, sess) -> float:
    rng = np.random.default_rng(spec.seed)
    buffer = ReplayBuffer(4096, env.observation_size, spec.seed)
    s = env.reset()

    def env_step(eps: float) -> None:
        nonlocal s
        q = sess.run(m.q_eval, {m.s: s[None]})[0]  # choose_action: not a learn step
        a = common.epsilon_greedy(q, eps, rng)
        s2, r, terminated, truncated = env.step(a)
        buffer.add(s, a, r, s2, terminated)
        s = env.reset() if terminated or truncated else s2

    for _ in range(WARMUP):
        env_step(1.0)
    td = float("nan")
    for step in range(spec.steps):
        env_step(common.epsilon(step, spec.steps))
        bs, ba, br, bs2, bdone = buffer.sample(BATCH)
        feed = {m.s: bs, m.a: ba, m.r: br, m.s_: bs2, m.done: bdone}
        if spec.twin == PLACEHOLDER:
            q_next = sess.run(m.q_next, {m.s_: bs2})
            feed = {m.s: bs, m.a: ba, m.q_target: br + GAMMA * (1.0 - bdone) * q_next.max(axis=1)}
        _, td = sess.run([m.train_op, m.loss], feed)
        if (step + 1) % SYNC_EVERY == 0:
            sess.run(m.replace_op)
        spec.on_step(step + 1)
    return float(td)


DEMO = Demo(
    name="dqn_tf1",
    title="seed 01's TF1 DQN: variable_scope eval_net/target_net, Session, hard replacement",
    leak="no stop_gradient on q_target and minimize() over every trainable variable",
    rules=RULES,
    train=train,
    default_steps=300,
    twins=(CLEAN, LEAKY, PLACEHOLDER),
)
