"""Value-based shapes: DQN with a hard-copied target, Double DQN.

DQN (tf.function): the TD target is computed inside the tape behind
`tf.stop_gradient`; mutant: no stop_gradient and the optimizer over every
trainable variable, so the target network learns from the TD error.
Double DQN (tf.function): the online network picks the next action (argmax, an
integer edge), the target evaluates it, all before the tape opens; mutant: the
evaluation moved inside the tape and the optimizer given both networks.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tb_gradscope.pairs import pair_models
from tb_gradscope.record import Recorder
from tests.support.corpus import kit
from tests.support.corpus.spec import TF_FUNCTION, Shape, StepProbe, watched_twin

GAMMA, COPY_EVERY = 0.9, 2
RULES = ("never(td, target/*)", "only(td, [online])")


def _dqn(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(1)
        online, target = kit.mlp("online", [4, kit.ACTIONS]), kit.mlp("target", [4, kit.ACTIONS])
        kit.copy_weights(target, online)
        opt = keras.optimizers.SGD(0.1)
        models = {"online": online, "target": target}
        pair = pair_models(target, online, every=COPY_EVERY)
        rec = Recorder(logdir, every_n_steps=1, models=models, pairs=[pair], rules=list(RULES))

        def var_list():
            return online.trainable_variables + (target.trainable_variables if leaky else [])

        def td_loss(b):
            q2 = tf.reduce_max(target(b["s2"]), axis=1)
            y = b["r"] + GAMMA * (1.0 - b["done"]) * q2
            if not leaky:
                y = tf.stop_gradient(y)
            q = tf.gather(online(b["s"]), b["a"], axis=1, batch_dims=1)
            return tf.reduce_mean(tf.square(y - q))

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                td = td_loss(b)
            rec.apply(opt, rec.gradients(tape, {"td": td}, var_list()))
            if rec.step % COPY_EVERY == 0:
                kit.copy_weights(target, online)
            rec.record_drift()

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                td = td_loss(b)
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(td, variables), variables))
            if opt.iterations % COPY_EVERY == 0:
                kit.copy_weights(target, online)

        if watched:
            train_step = rec.watch(watched_step)

        for step in range(4):
            b = kit.batch(step)
            forward = kit.taped(lambda _: td_loss(b))
            observer.before(
                step,
                StepProbe(
                    [kit.loss_probe("td", forward, opt, var_list)],
                    kit.variables_of(models),
                    [opt],
                    [kit.pair_probe(pair, target, online, "target")],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


def _double_dqn(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(2)
        online, target = kit.mlp("online", [5, kit.ACTIONS]), kit.mlp("target", [5, kit.ACTIONS])
        kit.copy_weights(target, online)
        opt = keras.optimizers.Adam(0.01)
        models = {"online": online, "target": target}
        pair = pair_models(target, online, every=COPY_EVERY)
        rec = Recorder(logdir, every_n_steps=1, models=models, pairs=[pair], rules=list(RULES))

        def var_list():
            return online.trainable_variables + (target.trainable_variables if leaky else [])

        def next_value(b):
            a2 = tf.argmax(online(b["s2"]), axis=1, output_type=tf.int32)
            return a2, tf.gather(target(b["s2"]), a2, axis=1, batch_dims=1)

        def before(b):
            a2, q2 = next_value(b)
            return (a2, None) if leaky else (a2, q2)

        def td_loss(b, pre):
            a2, q2 = pre
            if q2 is None:  # the mutant evaluates the target inside the tape
                q2 = tf.gather(target(b["s2"]), a2, axis=1, batch_dims=1)
            y = b["r"] + GAMMA * (1.0 - b["done"]) * q2
            q = tf.gather(online(b["s"]), b["a"], axis=1, batch_dims=1)
            return tf.reduce_mean(tf.square(y - q))

        @tf.function
        def train_step(b):
            pre = before(b)
            with rec.tape() as tape:
                td = td_loss(b, pre)
            rec.apply(opt, rec.gradients(tape, {"td": td}, var_list()))
            if rec.step % COPY_EVERY == 0:
                kit.copy_weights(target, online)
            rec.record_drift()

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            pre = before(b)
            with tf.GradientTape() as tape:
                td = td_loss(b, pre)
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(td, variables), variables))
            if opt.iterations % COPY_EVERY == 0:
                kit.copy_weights(target, online)

        if watched:
            train_step = rec.watch(watched_step)

        for step in range(4):
            b = kit.batch(step)
            forward = kit.taped(lambda pre: td_loss(b, pre), lambda: before(b))
            observer.before(
                step,
                StepProbe(
                    [kit.loss_probe("td", forward, opt, var_list)],
                    kit.variables_of(models),
                    [opt],
                    [kit.pair_probe(pair, target, online, "target")],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "dqn",
        TF_FUNCTION,
        _dqn(False),
        RULES,
        note="DQN, TD target behind stop_gradient inside the tape, hard copy every 2 steps",
    ),
    Shape(
        "dqn_leaky",
        TF_FUNCTION,
        _dqn(True),
        RULES,
        mutant_of="dqn",
        note="no stop_gradient, optimizer over online + target",
    ),
    Shape(
        "double_dqn",
        TF_FUNCTION,
        _double_dqn(False),
        RULES,
        note="Double DQN: argmax by online, value by target, both before the tape",
    ),
    Shape(
        "double_dqn_leaky",
        TF_FUNCTION,
        _double_dqn(True),
        RULES,
        mutant_of="double_dqn",
        note="target evaluated inside the tape, optimizer over both networks",
    ),
]


# The same shapes written as their users write them, under `@rec.watch`
# (tests/e2e/corpus/test_watched_corpus.py; not corpus shapes of their own).
WATCHED = [
    watched_twin(shape, build(leaky, watched=True))
    for shape, (build, leaky) in zip(
        SHAPES, [(_dqn, False), (_dqn, True), (_double_dqn, False), (_double_dqn, True)]
    )
]
