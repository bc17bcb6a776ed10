"""TF1 `Session` shapes, round 2: train ops in blocks, reference variables,
and the README's TF1 quickstart.

Written as TF1 code is (`tf` is `tensorflow.compat.v1`, each shape in its own
`tf.Graph`, the product attached as docs/TF1.md says: `GraphRecorder(...)` and
`gs.wrap(sess)`).

- PPO in blocks (Morvan-style `simply_PPO`): `pi` and an old policy `oldpi`
  built with `trainable=False`, the surrogate's ratio reading both without
  `tf.stop_gradient` (the gradient reaches `oldpi`, no optimizer applies it),
  a critic; each update hard-copies `pi` into `oldpi`, evaluates the
  advantage, then runs K calls of the actor's train op, then K of the
  critic's. Steps count per train op, so step s is each op's s-th call and
  the copy lands every K steps: `tracks(oldpi, pi, every=K)`. Mutant: `oldpi`
  built trainable and the actor's `minimize` without `var_list`, so the actor
  loss trains the old policy.
- A2C with reference variables (`variable_scope(..., use_resource=False)`,
  what `disable_v2_behavior()` gives every variable; that switch itself is
  process-wide, so `tests/unit/integrations/tf1/test_tf1_ref_vars.py` runs it in a child process):
  actor and critic nets, the advantage behind `tf.stop_gradient` in the
  policy loss, each optimizer with its `var_list`. Mutant: no stop_gradient
  and the actor's `minimize` without `var_list`: the policy loss trains the
  critic.
- The README's TF1 quickstart (seed 01's Agent, `Agent/layer1` in both
  optimizers' `var_list` by design), as written there; no mutant (the
  multihead shapes of `shapes_tf1` have it).

Drift: a TF1 recorder reads a pair's drift at step s just before step s's
first train call (after the copy of that update), so the loop calls
`observer.after(s)` right after `observer.before(s, ...)`, before that call.
A2C and the quickstart run `kit.tf1_loop`; PPO's blocks have a loop of their own.
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import tensorflow.compat.v1 as tf

from tb_gradscope.integrations.tf1 import GraphRecorder, pair_scopes
from tests.support.corpus import kit
from tests.support.corpus.shapes_tf1 import _dense
from tests.support.corpus.spec import TF1_SESSION, Shape

OBS, ACTIONS, BATCH = 3, 2, 8
K = 2  # train calls per block (A_UPDATE_STEPS = C_UPDATE_STEPS)
UPDATES = 3
PPO_STEPS = K * UPDATES
A2C_STEPS = 4


def _batch(update: int) -> dict[str, np.ndarray]:
    """A rollout batch that is a pure function of `update`."""
    rng = np.random.default_rng(3000 + update)
    return {
        "s": rng.normal(size=(BATCH, OBS)).astype(np.float32),
        "a": rng.normal(size=(BATCH, ACTIONS)).astype(np.float32),
        "a_int": rng.integers(0, ACTIONS, size=BATCH).astype(np.int32),
        "r": rng.normal(size=(BATCH, 1)).astype(np.float32),
        "x": rng.normal(size=(BATCH, 10)).astype(np.float32),
        "y1": rng.normal(size=(BATCH, 1)).astype(np.float32),
        "y2": rng.normal(size=(BATCH, 1)).astype(np.float32),
    }


# ----- PPO, train ops in blocks -----------------------------------------------


def build_ppo(leaky: bool) -> types.SimpleNamespace:
    """PPO with a clipped surrogate; `oldpi` trained by the actor loss if `leaky`."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(21)
        tfs = tf.placeholder(tf.float32, [None, OBS], "state")
        tfa = tf.placeholder(tf.float32, [None, ACTIONS], "action")
        tfadv = tf.placeholder(tf.float32, [None, 1], "advantage")
        tfdc_r = tf.placeholder(tf.float32, [None, 1], "discounted_r")
        with tf.variable_scope("critic"):
            l1 = _dense(tfs, 6, "l1", tf.nn.tanh)
            v = _dense(l1, 1, "v")
            advantage = tfdc_r - v
            closs = tf.reduce_mean(tf.square(advantage))
            ctrain_op = tf.train.AdamOptimizer(0.02).minimize(closs)

        def build_anet(name, trainable):
            with tf.variable_scope(name):
                l1 = _dense(tfs, 6, "l1", tf.nn.tanh, trainable)
                mu = _dense(l1, ACTIONS, "mu", tf.nn.tanh, trainable)
                log_std = tf.get_variable(
                    "log_std",
                    [1, ACTIONS],
                    trainable=trainable,
                    initializer=tf.constant_initializer(-0.5),
                )
            params = tf.get_collection(tf.GraphKeys.GLOBAL_VARIABLES, scope=name)
            return mu, log_std, params

        mu, log_std, pi_params = build_anet("pi", trainable=True)
        old_mu, old_log_std, oldpi_params = build_anet("oldpi", trainable=leaky)

        def log_prob(m, ls):
            return tf.reduce_sum(
                -0.5 * tf.square((tfa - m) / tf.exp(ls)) - ls, axis=1, keepdims=True
            )

        with tf.variable_scope("update_oldpi"):
            update_oldpi_op = [oldp.assign(p) for p, oldp in zip(pi_params, oldpi_params)]
        with tf.variable_scope("loss"):
            ratio = tf.exp(log_prob(mu, log_std) - log_prob(old_mu, old_log_std))
            surr = ratio * tfadv
            aloss = -tf.reduce_mean(tf.minimum(surr, tf.clip_by_value(ratio, 0.8, 1.2) * tfadv))
        with tf.variable_scope("atrain"):
            atrain_op = tf.train.AdamOptimizer(0.01).minimize(
                aloss, var_list=None if leaky else pi_params
            )
        init = tf.global_variables_initializer()
    return types.SimpleNamespace(**locals())


def _ppo(leaky: bool, rules: tuple[str, ...]):
    def train(logdir: str, observer: Any) -> None:
        m = build_ppo(leaky)
        with m.graph.as_default():
            pair = pair_scopes("oldpi", "pi", every=K)
            losses = {"aloss": m.aloss, "closs": m.closs}
            train_ops = {"aloss": m.atrain_op, "closs": m.ctrain_op}
            gs = GraphRecorder(
                logdir,
                losses=losses,
                train_ops=train_ops,
                every_n_steps=1,
                pairs=[pair],
                rules=list(rules),
            )
            sess = tf.Session()
            observer.prepare(
                kit.tf1_probe(sess, gs, {}, losses, train_ops, [kit.tf1_pair_probe(pair)])
            )
            run = gs.wrap(sess)
            run.run(m.init)
            for update in range(UPDATES):
                b = _batch(update)
                run.run(m.update_oldpi_op)
                adv = run.run(m.advantage, {m.tfs: b["s"], m.tfdc_r: b["r"]})
                actor_feed = {m.tfs: b["s"], m.tfa: b["a"], m.tfadv: adv}
                critic_feed = {m.tfs: b["s"], m.tfdc_r: b["r"]}
                oracle_feed = {**actor_feed, **critic_feed}
                for i in range(K):  # the actor's block: steps update * K + i
                    step = update * K + i
                    observer.before(
                        step,
                        kit.tf1_probe(
                            sess, gs, oracle_feed, losses, train_ops, [kit.tf1_pair_probe(pair)]
                        ),
                    )
                    observer.after(step)  # the drift GraphRecorder reads at this step
                    run.run(m.atrain_op, actor_feed)
                for _ in range(K):
                    run.run(m.ctrain_op, critic_feed)
            run.close()

    return train


# ----- A2C with reference variables --------------------------------------------


def build_a2c_ref(leaky: bool) -> types.SimpleNamespace:
    """A2C on reference variables; the advantage not cut and no var_list if `leaky`."""
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(22)
        s = tf.placeholder(tf.float32, [None, OBS], "s")
        a = tf.placeholder(tf.int32, [None], "a")
        r = tf.placeholder(tf.float32, [None, 1], "r")
        with tf.variable_scope("actor", use_resource=False):
            logits = _dense(_dense(s, 6, "l1", tf.nn.tanh), ACTIONS, "logits")
        with tf.variable_scope("critic", use_resource=False):
            value = _dense(_dense(s, 6, "l1", tf.nn.tanh), 1, "v")
        advantage = r - value
        if not leaky:
            advantage = tf.stop_gradient(advantage)
        neg_logp = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a, logits=logits)
        policy_loss = tf.reduce_mean(neg_logp * tf.squeeze(advantage, 1))
        value_loss = tf.reduce_mean(tf.square(r - value))
        actor_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="actor")
        critic_vars = tf.get_collection(tf.GraphKeys.TRAINABLE_VARIABLES, scope="critic")
        train_actor = tf.train.RMSPropOptimizer(0.02).minimize(
            policy_loss, var_list=None if leaky else actor_vars
        )
        train_critic = tf.train.RMSPropOptimizer(0.02).minimize(value_loss, var_list=critic_vars)
        init = tf.global_variables_initializer()
    return types.SimpleNamespace(**locals())


def _a2c_ref(leaky: bool, rules: tuple[str, ...]):
    def train(logdir: str, observer: Any) -> None:
        m = build_a2c_ref(leaky)

        def feed(step: int) -> dict:
            b = _batch(step)
            return {m.s: b["s"], m.a: b["a_int"], m.r: b["r"]}

        kit.tf1_loop(
            logdir,
            observer,
            m.graph,
            losses={"policy_loss": m.policy_loss, "value_loss": m.value_loss},
            train_ops={"policy_loss": m.train_actor, "value_loss": m.train_critic},
            rules=rules,
            start=[m.init],
            steps=A2C_STEPS,
            feed=feed,
            step=lambda run, step, feed: run.run([m.train_actor, m.train_critic], feed),
        )

    return train


# ----- the README's TF1 quickstart ---------------------------------------------


def build_readme_quickstart() -> types.SimpleNamespace:
    """README.md's "Quickstart: TF1 Session code", its graph as written there."""
    v1 = tf
    graph = tf.Graph()
    with graph.as_default():
        tf.set_random_seed(23)
        X = v1.placeholder(tf.float32, [None, 10], "X")
        Y1 = v1.placeholder(tf.float32, [None, 1], "Y1")
        Y2 = v1.placeholder(tf.float32, [None, 1], "Y2")
        with v1.variable_scope("Agent"):
            with v1.variable_scope("layer1"):
                s = tf.matmul(X, v1.get_variable("w1", [10, 8])) + v1.get_variable("b1", [1, 8])
            with v1.variable_scope("layer2_1"):
                y1 = tf.matmul(s, v1.get_variable("w21", [8, 1]))
            with v1.variable_scope("layer2_2"):
                y2 = tf.matmul(s, v1.get_variable("w22", [8, 1]))

        def scope(name):
            return v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, scope=name)

        loss1 = v1.losses.mean_squared_error(labels=Y1, predictions=y1)
        loss2 = v1.losses.mean_squared_error(labels=Y2, predictions=y2)
        train1 = v1.train.AdamOptimizer(1e-3).minimize(
            loss1, var_list=scope("Agent/layer1") + scope("Agent/layer2_1")
        )
        train2 = v1.train.AdamOptimizer(1e-3).minimize(
            loss2, var_list=scope("Agent/layer1") + scope("Agent/layer2_2")
        )
        init = v1.global_variables_initializer()
    return types.SimpleNamespace(**locals())


def _readme_quickstart(rules: tuple[str, ...]):
    def train(logdir: str, observer: Any) -> None:
        m = build_readme_quickstart()

        def feed(step: int) -> dict:
            b = _batch(step)
            return {m.X: b["x"], m.Y1: b["y1"], m.Y2: b["y2"]}

        kit.tf1_agent_loop(logdir, observer, m, rules=rules, steps=A2C_STEPS, feed=feed)

    return train


PPO_RULES = (
    "only(aloss, [pi])",
    "never(aloss, oldpi/*)",
    "only(closs, [critic])",
    f"tracks(oldpi, pi, every={K})",
)
A2C_RULES = (
    "only(policy_loss, [actor])",
    "never(policy_loss, critic/*)",
    "only(value_loss, [critic])",
)
README_RULES = (
    "never(loss1, Agent/layer2_2)",
    "never(loss2, Agent/layer2_1)",
    "only(loss2, [Agent/layer1, Agent/layer2_2])",
)

SHAPES = [
    Shape(
        "tf1_ppo_blocks",
        TF1_SESSION,
        _ppo(False, PPO_RULES),
        PPO_RULES,
        steps=PPO_STEPS,
        note=f"TF1 PPO: hard copy into trainable=False oldpi, then {K} actor calls, then {K} critic calls",
    ),
    Shape(
        "tf1_ppo_blocks_leaky",
        TF1_SESSION,
        _ppo(True, PPO_RULES),
        PPO_RULES,
        mutant_of="tf1_ppo_blocks",
        steps=PPO_STEPS,
        advice=("var_list",),
        note="oldpi trainable and the actor's minimize without var_list: the actor loss trains oldpi",
    ),
    Shape(
        "tf1_a2c_ref",
        TF1_SESSION,
        _a2c_ref(False, A2C_RULES),
        A2C_RULES,
        steps=A2C_STEPS,
        note="TF1 A2C on reference variables (use_resource=False), advantage behind stop_gradient",
    ),
    Shape(
        "tf1_a2c_ref_leaky",
        TF1_SESSION,
        _a2c_ref(True, A2C_RULES),
        A2C_RULES,
        mutant_of="tf1_a2c_ref",
        steps=A2C_STEPS,
        note="advantage not cut and the actor's minimize without var_list: the policy loss trains the critic",
    ),
    Shape(
        "tf1_readme_quickstart",
        TF1_SESSION,
        _readme_quickstart(README_RULES),
        README_RULES,
        steps=A2C_STEPS,
        note="README's TF1 quickstart: seed 01's Agent, layer1 in both optimizers' var_list",
    ),
]
