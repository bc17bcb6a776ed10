"""Truth on unseen code, round 3 (issue 57): steps and records.

- readme_rec_function_drift: the README quickstart's loop as written
  (`@rec.function`, hard copy on `rec.step`, then `record_drift()`), recorded
  every 2 steps: its drift is labelled with its gradients' step, from 0.
- tf1_ppo_long_blocks: a TF1 PPO whose train ops run in blocks longer than
  4 x every_n_steps (the critic's updates of the last steps are not measured:
  NaN), its `trainable=False` oldpi a declared pair.
- tf1_resource_global_step: a TF1 graph built with TF2 behaviour left on
  (resource variables, no `disable_v2_behavior`) and the classic
  `tf.Variable(0, trainable=False, name="global_step")` passed to `minimize`;
  recorded from step 0 on.

The TD3 loop with its delayed actor on odd steps (item 9) is `shapes_wp`'s
td3_odd_delay; the scope shapes of the same issue are `shapes_truth3_scopes`.
"""

from __future__ import annotations

import dataclasses
import functools

import keras
import numpy as np
import tensorflow as tf

from tests.support.corpus import kit
from tests.support.corpus.spec import TF1_SESSION, TF_FUNCTION, Shape, StepProbe

STEPS = 4

# ----- the README's custom loop: rec.function, apply, hard copy, record_drift ------

README_RULES = ("never(td, target/*)",)
README_EVERY, README_COPY, README_STEPS = 2, 3, 6


def _readme_loop(logdir, observer, watched: bool = False):
    """The README quickstart's loop as written (`@rec.function`, `rec.apply`, the
    hard copy on `rec.step`, then `record_drift()`): drift is labelled with the
    step of its gradients, from step 0 (issue 57 item 8)."""
    from tb_gradscope.pairs import pair_models
    from tb_gradscope.record import Recorder

    kit.seed(8)
    online, target = kit.mlp("online", [4, kit.ACTIONS]), kit.mlp("target", [4, kit.ACTIONS])
    kit.copy_weights(target, online)
    opt = keras.optimizers.Adam(0.01)
    models = {"online": online, "target": target}
    pair = pair_models(target, online, every=README_COPY)
    rec = Recorder(
        logdir, every_n_steps=README_EVERY, models=models, pairs=[pair], rules=list(README_RULES)
    )

    def td_loss(b):
        q = tf.gather(online(b["s"]), b["a"], batch_dims=1)
        y = b["r"] + 0.99 * tf.stop_gradient(tf.reduce_max(target(b["s2"]), axis=1))
        return tf.reduce_mean(tf.square(y - q))

    @rec.function
    def train_step(b):
        with rec.tape() as tape:
            losses = {"td": td_loss(b)}
        rec.apply(opt, rec.gradients(tape, losses, online.trainable_variables))
        if rec.step % README_COPY == 0:
            for t, o in zip(target.weights, online.weights):
                t.assign(o)
        rec.record_drift()

    def watched_step(b):  # the README's watched quickstart: the step as written
        with tf.GradientTape() as tape:
            td = td_loss(b)
        variables = online.trainable_variables
        opt.apply_gradients(zip(tape.gradient(td, variables), variables))
        if opt.iterations % README_COPY == 0:
            for t, o in zip(target.weights, online.weights):
                t.assign(o)

    if watched:
        train_step = rec.watch(watched_step)

    for step in range(README_STEPS):
        b = kit.batch(step)
        observer.before(
            step,
            StepProbe(
                [
                    kit.loss_probe(
                        "td",
                        kit.taped(lambda _: td_loss(b)),
                        opt,
                        lambda: online.trainable_variables,
                    )
                ],
                kit.variables_of(models),
                [opt],
                [kit.pair_probe(pair, target, online, "target")],
            ),
        )
        train_step(b)
        observer.after(step)
    rec.close()


# ----- TF1 PPO, train ops in blocks longer than the paused windows --------------

LONG_K = 6  # calls per block at every_n_steps=1: more recorded steps wait than 4 windows hold
LONG_RULES = ("only(aloss, [pi])", "never(aloss, oldpi/*)", "only(closs, [critic])")


def _tf1_ppo_long_blocks(logdir, observer):
    """`shapes_tf1r2`'s PPO (oldpi a trainable=False copy of pi) in blocks of
    LONG_K actor calls then LONG_K critic calls, recorded at every step, the
    oldpi/pi snapshot declared with its copy period (pairs="auto" finds it too:
    tests/unit/integrations/tf1/test_tf1_pairs.py; undeclared, one update's
    unmoved snapshot reads as a frozen target)."""
    from tb_gradscope.integrations.tf1 import GraphRecorder, pair_scopes
    from tests.support.corpus.shapes_tf1r2 import _batch, build_ppo

    m = build_ppo(False)
    with m.graph.as_default():
        pair = pair_scopes("oldpi", "pi", every=LONG_K)
        losses = {"aloss": m.aloss, "closs": m.closs}
        train_ops = {"aloss": m.atrain_op, "closs": m.ctrain_op}
        gs = GraphRecorder(
            logdir,
            losses=losses,
            train_ops=train_ops,
            every_n_steps=1,
            pairs=[pair],
            rules=list(LONG_RULES),
        )
        sess = tf.compat.v1.Session()
        probes = [kit.tf1_pair_probe(pair)]
        observer.prepare(kit.tf1_probe(sess, gs, {}, losses, train_ops, probes))
        run = gs.wrap(sess)
        run.run(m.init)
        b = _batch(0)
        run.run(m.update_oldpi_op)
        adv = run.run(m.advantage, {m.tfs: b["s"], m.tfdc_r: b["r"]})
        actor_feed = {m.tfs: b["s"], m.tfa: b["a"], m.tfadv: adv}
        critic_feed = {m.tfs: b["s"], m.tfdc_r: b["r"]}
        for step in range(LONG_K):
            probe = kit.tf1_probe(
                sess, gs, {**actor_feed, **critic_feed}, losses, train_ops, probes
            )
            observer.before(step, probe)
            observer.after(step)
            run.run(m.atrain_op, actor_feed)
        for _ in range(LONG_K):
            run.run(m.ctrain_op, critic_feed)
        run.close()


# ----- TF1 in a tf.Graph with resource variables and a classic global step -------

GLOBAL_STEP_RULES = ("only(loss, [net/l1, net/l2])", "never(loss, target/*)")


def _tf1_resource_global_step(logdir, observer):
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(11)
        s = v1.placeholder(tf.float32, [None, kit.OBS], "s")
        y = v1.placeholder(tf.float32, [None, 1], "y")

        def dense(inputs, units, name, activation=None):
            w = tf.Variable(
                v1.glorot_uniform_initializer()((inputs.shape[-1], units)), name=f"{name}/w"
            )
            b = tf.Variable(tf.zeros([units]), name=f"{name}/b")
            out = tf.matmul(inputs, w) + b
            return activation(out) if activation else out

        q = dense(dense(s, 4, "net/l1", tf.tanh), 1, "net/l2")
        target = dense(dense(s, 4, "target/l1", tf.tanh), 1, "target/l2")
        global_step = tf.Variable(0, trainable=False, name="global_step")
        loss = tf.reduce_mean((y + 0.5 * tf.stop_gradient(target) - q) ** 2)
        net_vars = [v for v in v1.trainable_variables() if v.name.startswith("net/")]
        train = v1.train.AdamOptimizer(0.02).minimize(
            loss, var_list=net_vars, global_step=global_step
        )
        init = v1.global_variables_initializer()

    def feed(step: int) -> dict:
        rng = np.random.default_rng(5700 + step)
        return {
            s: rng.normal(size=(kit.BATCH, kit.OBS)).astype(np.float32),
            y: rng.normal(size=(kit.BATCH, 1)).astype(np.float32),
        }

    kit.tf1_loop(
        logdir,
        observer,
        graph,
        losses={"loss": loss},
        train_ops={"loss": train},
        rules=GLOBAL_STEP_RULES,
        start=[init],
        steps=STEPS,
        feed=feed,
        step=lambda run, _step, fed: run.run(train, fed),
    )


SHAPES = [
    Shape(
        "readme_rec_function_drift",
        TF_FUNCTION,
        _readme_loop,
        README_RULES,
        steps=README_STEPS,
        every_n_steps=README_EVERY,
        note="the README's custom loop (rec.function, apply, hard copy on rec.step, record_drift): "
        "drift labelled with its gradients' step, from step 0",
        drift_from_start=True,
    ),
    Shape(
        "tf1_ppo_long_blocks",
        TF1_SESSION,
        _tf1_ppo_long_blocks,
        LONG_RULES,
        steps=LONG_K,
        note=f"TF1 PPO, blocks of {LONG_K} actor then {LONG_K} critic calls recorded at every step "
        "(the critic's late updates read NaN, not measured)",
    ),
    Shape(
        "tf1_resource_global_step",
        TF1_SESSION,
        _tf1_resource_global_step,
        GLOBAL_STEP_RULES,
        note="TF1 in a tf.Graph with resource variables and tf.Variable(0, name='global_step')",
    ),
]


# The README loop in its watched form (README's TF2 quickstart, `@rec.watch`)
# (tests/e2e/corpus/test_watched_corpus.py; not a corpus shape of its own).
WATCHED = [
    dataclasses.replace(
        SHAPES[0],
        name="readme_rec_function_drift_watched",
        train=functools.partial(_readme_loop, watched=True),
        note="the README's watched quickstart loop: hard copy on optimizer.iterations",
    )
]
