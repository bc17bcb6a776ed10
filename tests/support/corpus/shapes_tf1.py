"""TF1 `Session` shapes: DQN, DDPG, SAC and seed 01's multi-head Agent.

Written as TF1 code is: placeholders, `variable_scope`, `tf.get_variable`,
`minimize(var_list=...)`, `tf.gradients`, one `Session`. `tf` below is
`tensorflow.compat.v1`; each shape builds its own `tf.Graph`, so TF1 shapes run
in the same process as the TF2 ones. The product is attached the documented
way (docs/TF1.md): `GraphRecorder(...)` and `gs.wrap(sess)`, nothing else.

- DQN (seed 01, second form): the TD target from `target_net` behind
  `tf.stop_gradient`, RMSProp `minimize(loss)` over every trainable variable,
  the target replaced every 2 learn steps. Mutant: no stop_gradient, so the
  same `minimize` trains `target_net` on the TD error.
- DDPG (Morvan-style): `trainable=False` target nets, the critic fed the
  actor's output (replay actions fed over it when the critic learns), actor
  and critic optimizers with `var_list`, soft replacement after each learn
  step. Mutant: the critic's optimizer without `var_list`: the TD error moves
  the actor.
- SAC (Spinning Up-style): twin Q, a squashed Gaussian policy whose noise is
  fed, one `tf.stop_gradient` on the backup cutting target/q1, target/q2 and
  main/pi; the policy, value and Polyak ops in one `sess.run` (control
  dependencies chain them). Mutant: no stop_gradient on the backup and the
  value optimizer without `var_list`.
- multi-head Agent (seed 01): shared layer1, two heads, two Adam optimizers
  with `var_list` (loss2's only its head, as the `multihead` demo chooses:
  with the seed's own var_lists dropping one changes nothing). Mutant: loss2's
  optimizer without `var_list`, so loss2 also trains layer1.

The loops are `kit.tf1_loop` (which says when drift is read) around each
shape's own calls.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow.compat.v1 as tf

from tb_gradscope.integrations.tf1 import pair_scopes
from tests.support.corpus import kit
from tests.support.corpus.spec import TF1_SESSION, Shape

OBS, ACTIONS, BATCH, GAMMA = 3, 2, 8, 0.9
STEPS = 4

Build = Callable[[bool], types.SimpleNamespace]


def _dense(x, units: int, name: str, activation=None, trainable: bool = True):
    """A dense layer from `tf.get_variable`, as TF1 code writes them (tanh: no
    dead units, so a zero gradient is never a numerical accident)."""
    with tf.variable_scope(name):
        w = tf.get_variable(
            "w",
            [int(x.shape[-1]), units],
            trainable=trainable,
            initializer=tf.random_normal_initializer(0.0, 0.5),
        )
        b = tf.get_variable(
            "b", [1, units], trainable=trainable, initializer=tf.constant_initializer(0.1)
        )
        y = tf.matmul(x, w) + b
    return activation(y) if activation else y


def _batch(step: int) -> dict[str, np.ndarray]:
    """A transition batch that is a pure function of `step`."""
    rng = np.random.default_rng(2000 + step)
    return {
        "s": rng.normal(size=(BATCH, OBS)).astype(np.float32),
        "s_": rng.normal(size=(BATCH, OBS)).astype(np.float32),
        "a": rng.integers(0, ACTIONS, size=BATCH).astype(np.int32),
        "a_cont": rng.uniform(-1, 1, size=(BATCH, ACTIONS)).astype(np.float32),
        "r": rng.normal(size=BATCH).astype(np.float32),
        "done": (rng.uniform(size=BATCH) < 0.2).astype(np.float32),
        "noise": rng.normal(size=(BATCH, ACTIONS)).astype(np.float32),
        "x": rng.normal(size=(BATCH, 10)).astype(np.float32),
    }


# ----- the programs ----------------------------------------------------------


def build_dqn(leaky: bool) -> types.SimpleNamespace:
    """Seed 01's DQN; `q_target` behind stop_gradient unless `leaky`."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(11)
        s = tf.placeholder(tf.float32, [None, OBS], name="s")
        s_ = tf.placeholder(tf.float32, [None, OBS], name="s_")
        r = tf.placeholder(tf.float32, [None], name="r")
        a = tf.placeholder(tf.int32, [None], name="a")
        with tf.variable_scope("eval_net"):
            q_eval = _dense(_dense(s, 6, "e1", tf.nn.tanh), ACTIONS, "q")
        with tf.variable_scope("target_net"):
            q_next = _dense(_dense(s_, 6, "t1", tf.nn.tanh), ACTIONS, "t2")
        with tf.variable_scope("q_target"):
            q_target = r + GAMMA * tf.reduce_max(q_next, axis=1, name="Qmax_s_")
            if not leaky:
                q_target = tf.stop_gradient(q_target)
        with tf.variable_scope("q_eval"):
            a_indices = tf.stack([tf.range(tf.shape(a)[0], dtype=tf.int32), a], axis=1)
            q_eval_wrt_a = tf.gather_nd(params=q_eval, indices=a_indices)
        with tf.variable_scope("loss"):
            loss = tf.reduce_mean(tf.squared_difference(q_target, q_eval_wrt_a, name="TD_error"))
        with tf.variable_scope("train"):
            train_op = tf.train.RMSPropOptimizer(0.05).minimize(loss)
        t_params = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="target_net")
        e_params = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="eval_net")
        with tf.variable_scope("hard_replacement"):
            target_replace_op = [tf.assign(t, e) for t, e in zip(t_params, e_params)]
        init = tf.global_variables_initializer()
    return types.SimpleNamespace(**locals())


def build_ddpg(leaky: bool) -> types.SimpleNamespace:
    """DDPG with trainable=False targets; the critic's var_list dropped if `leaky`."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(12)
        S = tf.placeholder(tf.float32, [None, OBS], "s")
        S_ = tf.placeholder(tf.float32, [None, OBS], "s_")
        R = tf.placeholder(tf.float32, [None, 1], "r")

        def build_a(s, scope, trainable):
            with tf.variable_scope(scope):
                net = _dense(s, 6, "l1", tf.nn.tanh, trainable)
                return _dense(net, ACTIONS, "a", tf.nn.tanh, trainable)

        def build_c(s, a, scope, trainable):
            with tf.variable_scope(scope):
                w1_s = tf.get_variable("w1_s", [OBS, 6], trainable=trainable)
                w1_a = tf.get_variable("w1_a", [ACTIONS, 6], trainable=trainable)
                b1 = tf.get_variable("b1", [1, 6], trainable=trainable)
                net = tf.nn.tanh(tf.matmul(s, w1_s) + tf.matmul(a, w1_a) + b1)
                return _dense(net, 1, "q", trainable=trainable)

        with tf.variable_scope("Actor"):
            a = build_a(S, "eval", trainable=True)
            a_ = build_a(S_, "target", trainable=False)
        with tf.variable_scope("Critic"):
            q = build_c(S, a, "eval", trainable=True)  # the actor's output feeds the critic
            q_ = build_c(S_, a_, "target", trainable=False)
        ae_params = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="Actor/eval")
        at_params = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="Actor/target")
        ce_params = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="Critic/eval")
        ct_params = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope="Critic/target")
        soft_replace = [
            tf.assign(t, (1 - 0.1) * t + 0.1 * e)
            for t, e in zip(at_params + ct_params, ae_params + ce_params)
        ]
        hard_replace = [
            tf.assign(t, e) for t, e in zip(at_params + ct_params, ae_params + ce_params)
        ]
        q_target = R + GAMMA * q_
        td_error = tf.losses.mean_squared_error(labels=q_target, predictions=q)
        ctrain = tf.train.AdamOptimizer(0.01).minimize(
            td_error, var_list=None if leaky else ce_params
        )
        a_loss = -tf.reduce_mean(q)
        atrain = tf.train.AdamOptimizer(0.01).minimize(a_loss, var_list=ae_params)
        init = tf.global_variables_initializer()
    return types.SimpleNamespace(**locals())


def build_sac(leaky: bool) -> types.SimpleNamespace:
    """SAC: twin Q, stop_gradient on the backup (dropped, with the value
    optimizer's var_list, if `leaky`), policy + value + Polyak in one run."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(13)
        x_ph = tf.placeholder(tf.float32, [None, OBS], "x")
        x2_ph = tf.placeholder(tf.float32, [None, OBS], "x2")
        a_ph = tf.placeholder(tf.float32, [None, ACTIONS], "a")
        r_ph = tf.placeholder(tf.float32, [None], "r")
        d_ph = tf.placeholder(tf.float32, [None], "d")
        eps_ph = tf.placeholder(tf.float32, [None, ACTIONS], "eps")
        alpha, polyak = 0.2, 0.9

        def mlp_gaussian_policy(x, eps):
            net = _dense(x, 6, "l1", tf.nn.tanh)
            mu, log_std = _dense(net, ACTIONS, "mu"), _dense(net, ACTIONS, "log_std")
            log_std = tf.clip_by_value(log_std, -5.0, 1.0)
            pre = mu + tf.exp(log_std) * eps
            logp = tf.reduce_sum(-0.5 * eps**2 - log_std - 0.5 * np.log(2 * np.pi), axis=1)
            pi = tf.tanh(pre)
            logp -= tf.reduce_sum(tf.log(1 - pi**2 + 1e-6), axis=1)
            return pi, logp

        def q_function(x, a):
            return tf.squeeze(
                _dense(_dense(tf.concat([x, a], -1), 6, "l1", tf.nn.tanh), 1, "out"), 1
            )

        def actor_critic(x, a, eps):
            with tf.variable_scope("pi"):
                pi, logp_pi = mlp_gaussian_policy(x, eps)
            with tf.variable_scope("q1"):
                q1 = q_function(x, a)
            with tf.variable_scope("q2"):
                q2 = q_function(x, a)
            return pi, logp_pi, q1, q2

        with tf.variable_scope("main"):
            pi, logp_pi, q1, q2 = actor_critic(x_ph, a_ph, eps_ph)
        with tf.variable_scope("main", reuse=True):
            _, _, q1_pi, q2_pi = actor_critic(x_ph, pi, eps_ph)
            pi_next, logp_pi_next, _, _ = actor_critic(x2_ph, a_ph, eps_ph)
        with tf.variable_scope("target"):
            _, _, q1_targ, q2_targ = actor_critic(x2_ph, pi_next, eps_ph)

        min_q_pi = tf.minimum(q1_pi, q2_pi)
        min_q_targ = tf.minimum(q1_targ, q2_targ)
        q_backup = r_ph + GAMMA * (1 - d_ph) * (min_q_targ - alpha * logp_pi_next)
        if not leaky:
            q_backup = tf.stop_gradient(q_backup)
        pi_loss = tf.reduce_mean(alpha * logp_pi - min_q_pi)
        q1_loss = 0.5 * tf.reduce_mean((q_backup - q1) ** 2)
        q2_loss = 0.5 * tf.reduce_mean((q_backup - q2) ** 2)
        value_loss = q1_loss + q2_loss

        def get_vars(scope):
            return [x for x in tf.global_variables() if scope in x.name]

        main_vars, targ_vars = get_vars("main"), get_vars("target")  # before any optimizer slot

        train_pi_op = tf.train.AdamOptimizer(0.01).minimize(pi_loss, var_list=get_vars("main/pi"))
        value_params = get_vars("main/q")
        with tf.control_dependencies([train_pi_op]):
            train_value_op = tf.train.AdamOptimizer(0.01).minimize(
                value_loss, var_list=None if leaky else value_params
            )
        with tf.control_dependencies([train_value_op]):
            target_update = tf.group(
                [
                    tf.assign(v_targ, polyak * v_targ + (1 - polyak) * v_main)
                    for v_main, v_targ in zip(main_vars, targ_vars)
                ]
            )
        step_ops = [pi_loss, q1_loss, q2_loss, train_pi_op, train_value_op, target_update]
        target_init = tf.group(
            [tf.assign(v_targ, v_main) for v_main, v_targ in zip(main_vars, targ_vars)]
        )
        init = tf.global_variables_initializer()
    return types.SimpleNamespace(**locals())


def build_multihead(leaky: bool) -> types.SimpleNamespace:
    """Seed 01's Agent; loss2's optimizer without var_list if `leaky`."""
    m = kit.tf1_agent(
        seed=14, n1=6, input_dim=10, lr=0.01, loss2_var_list="all" if leaky else "head"
    )
    with m.graph.as_default():
        m.init = tf.global_variables_initializer()
    return m


# ----- the training loops, with the product and the observer -----------------


def _dqn(leaky: bool, rules: tuple[str, ...]):
    replace_every = 2

    def train(logdir: str, observer: Any) -> None:
        m = build_dqn(leaky)

        def feed(learn_step: int) -> dict:
            b = _batch(learn_step)
            return {m.s: b["s"], m.a: b["a"], m.r: b["r"], m.s_: b["s_"]}

        def step(run, learn_step: int, feed: dict) -> None:
            run.run([m.train_op, m.loss], feed_dict=feed)
            if (learn_step + 1) % replace_every == 0:
                run.run(m.target_replace_op)

        kit.tf1_loop(
            logdir,
            observer,
            m.graph,
            losses={"td": m.loss},
            train_ops={"td": m.train_op},
            pairs=lambda: [pair_scopes("target_net", "eval_net", every=replace_every)],
            rules=rules,
            start=[m.init, m.target_replace_op],
            steps=STEPS,
            feed=feed,
            step=step,
        )

    return train


def _ddpg(leaky: bool, rules: tuple[str, ...]):
    def train(logdir: str, observer: Any) -> None:
        m = build_ddpg(leaky)

        def feed(step: int) -> dict:
            b = _batch(step)
            # The oracle's one feed: the critic's (replay actions over the actor's output).
            return {m.S: b["s"], m.a: b["a_cont"], m.R: b["r"][:, None], m.S_: b["s_"]}

        def step(run, _step: int, feed: dict) -> None:
            run.run(m.atrain, {m.S: feed[m.S]})
            run.run(m.ctrain, feed)
            run.run(m.soft_replace)

        kit.tf1_loop(
            logdir,
            observer,
            m.graph,
            losses={"td_error": m.td_error, "a_loss": m.a_loss},
            train_ops={"td_error": m.ctrain, "a_loss": m.atrain},
            pairs=lambda: [
                pair_scopes("Actor/target", "Actor/eval", tau=0.1),
                pair_scopes("Critic/target", "Critic/eval", tau=0.1),
            ],
            rules=rules,
            start=[m.init, m.hard_replace],
            steps=STEPS,
            feed=feed,
            step=step,
        )

    return train


def _sac(leaky: bool, rules: tuple[str, ...]):
    def train(logdir: str, observer: Any) -> None:
        m = build_sac(leaky)

        def feed(step: int) -> dict:
            b = _batch(step)
            return {
                m.x_ph: b["s"],
                m.x2_ph: b["s_"],
                m.a_ph: b["a_cont"],
                m.r_ph: b["r"],
                m.d_ph: b["done"],
                m.eps_ph: b["noise"],
            }

        kit.tf1_loop(
            logdir,
            observer,
            m.graph,
            losses={"pi_loss": m.pi_loss, "value_loss": m.value_loss},
            train_ops={"pi_loss": m.train_pi_op, "value_loss": m.train_value_op},
            pairs=lambda: [
                pair_scopes("target/q1", "main/q1", tau=0.1),
                pair_scopes("target/q2", "main/q2", tau=0.1),
            ],
            rules=rules,
            start=[m.init, m.target_init],
            steps=STEPS,
            feed=feed,
            step=lambda run, step, feed: run.run(m.step_ops, feed),
        )

    return train


def _multihead(leaky: bool, rules: tuple[str, ...]):
    def train(logdir: str, observer: Any) -> None:
        m = build_multihead(leaky)

        def feed(step: int) -> dict:
            x = _batch(step)["x"]
            return {m.X: x, m.Y1: x[:, :1] * 2.0, m.Y2: -x[:, 1:2]}

        kit.tf1_agent_loop(logdir, observer, m, rules=rules, steps=STEPS, feed=feed)

    return train


DQN_RULES = ("never(td, target_net/*)", "blocked(td, target_net/*)", "only(td, [eval_net])")
DDPG_RULES = (
    "never(td_error, Actor/*)",
    "only(td_error, [Critic/eval])",
    "only(a_loss, [Actor/eval])",
    "never(*, */target/*)",
)
SAC_RULES = (
    "only(pi_loss, [main/pi])",
    "never(value_loss, main/pi/*)",
    "never(value_loss, target/*)",
    "blocked(value_loss, target/q1)",
    "blocked(value_loss, target/q2)",
)
MULTIHEAD_RULES = (
    "never(loss2, Agent/layer1)",
    "only(loss2, [Agent/layer2_2])",
    "never(loss1, Agent/layer2_2)",
)

SHAPES = [
    Shape(
        "tf1_dqn",
        TF1_SESSION,
        _dqn(False, DQN_RULES),
        DQN_RULES,
        steps=STEPS,
        note="seed 01's TF1 DQN: q_target behind stop_gradient, minimize(loss), hard copy every 2",
    ),
    Shape(
        "tf1_dqn_leaky",
        TF1_SESSION,
        _dqn(True, DQN_RULES),
        DQN_RULES,
        mutant_of="tf1_dqn",
        steps=STEPS,
        note="no stop_gradient: minimize(loss) trains target_net",
    ),
    Shape(
        "tf1_ddpg",
        TF1_SESSION,
        _ddpg(False, DDPG_RULES),
        DDPG_RULES,
        steps=STEPS,
        note="TF1 DDPG: trainable=False targets, critic fed the actor's output, var_list per optimizer",
    ),
    Shape(
        "tf1_ddpg_leaky",
        TF1_SESSION,
        _ddpg(True, DDPG_RULES),
        DDPG_RULES,
        mutant_of="tf1_ddpg",
        steps=STEPS,
        note="critic optimizer without var_list: the TD error trains the actor",
    ),
    Shape(
        "tf1_sac",
        TF1_SESSION,
        _sac(False, SAC_RULES),
        SAC_RULES,
        steps=STEPS,
        note="TF1 SAC: one stop_gradient on the backup, pi + value + Polyak in one sess.run",
    ),
    Shape(
        "tf1_sac_leaky",
        TF1_SESSION,
        _sac(True, SAC_RULES),
        SAC_RULES,
        mutant_of="tf1_sac",
        steps=STEPS,
        note="backup without stop_gradient, value optimizer without var_list",
    ),
    Shape(
        "tf1_multihead",
        TF1_SESSION,
        _multihead(False, MULTIHEAD_RULES),
        MULTIHEAD_RULES,
        steps=STEPS,
        note="seed 01's Agent: shared layer1, two heads, two optimizers with var_list",
    ),
    Shape(
        "tf1_multihead_leaky",
        TF1_SESSION,
        _multihead(True, MULTIHEAD_RULES),
        MULTIHEAD_RULES,
        mutant_of="tf1_multihead",
        steps=STEPS,
        note="loss2's optimizer without var_list: loss2 trains layer1",
    ),
]
