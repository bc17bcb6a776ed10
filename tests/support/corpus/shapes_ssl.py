"""Self-supervised and adversarial shapes: BYOL, Mean-Teacher with BatchNorm, GAN.

BYOL (tf.function): the EMA teacher's projection is computed before the tape
opens (the tape boundary is the cut); mutant: the teacher inside the tape and
in the optimizer's var_list.
Mean-Teacher (tf.function): a student with BatchNorm, a teacher that is its
EMA (moving statistics included) evaluated inside the tape behind
stop_gradient, a supervised and a consistency loss summed; mutant: no
stop_gradient and the teacher's variables handed to the optimizer.
GAN (two tf.functions, alternating steps): the discriminator step and the
generator step, each with its own optimizer, each a recorded step; mutant: the
generator's optimizer over both networks.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tb_gradscope.pairs import pair_models
from tb_gradscope.record import Recorder
from tests.support.corpus import kit
from tests.support.corpus.spec import TF_FUNCTION, Shape, StepProbe, watched_twin

TAU = 0.1

# ----- BYOL ------------------------------------------------------------------------

BYOL_RULES = ("never(byol, target/*)", "blocked(byol, target/*)", "only(byol, [online, predictor])")


def _cosine_loss(p, z):
    p = tf.math.l2_normalize(p, axis=1)
    z = tf.math.l2_normalize(z, axis=1)
    return tf.reduce_mean(2.0 - 2.0 * tf.reduce_sum(p * z, axis=1))


def _byol(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(8)
        online, target = kit.mlp("online", [5, 3]), kit.mlp("target", [5, 3])
        predictor = kit.mlp("predictor", [3, 3], inputs=3)
        kit.copy_weights(target, online)
        opt = keras.optimizers.Adam(0.01)
        models = {"online": online, "predictor": predictor, "target": target}
        pair = pair_models(target, online, tau=TAU)
        rec = Recorder(logdir, every_n_steps=1, models=models, pairs=[pair], rules=list(BYOL_RULES))

        def var_list():
            return (
                online.trainable_variables
                + predictor.trainable_variables
                + (target.trainable_variables if leaky else [])
            )

        def teacher(b):
            return target(b["s2"])

        def byol_loss(b, z):
            if z is None:  # the mutant: the teacher inside the tape
                z = teacher(b)
            return _cosine_loss(predictor(online(b["s"])), z)

        def pre(b):
            return None if leaky else teacher(b)

        @tf.function
        def train_step(b):
            z = pre(b)
            with rec.tape() as tape:
                loss = byol_loss(b, z)
            rec.apply(opt, rec.gradients(tape, {"byol": loss}, var_list()))
            kit.polyak(target, online, TAU)
            rec.record_drift()

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            z = pre(b)
            with tf.GradientTape() as tape:
                loss = byol_loss(b, z)
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            kit.polyak(target, online, TAU)

        if watched:
            train_step = rec.watch(watched_step, losses={"loss": "byol"})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [
                        kit.loss_probe(
                            "byol",
                            kit.taped(lambda z: byol_loss(b, z), lambda: pre(b)),
                            opt,
                            var_list,
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

    return train


# ----- Mean-Teacher with BatchNorm ----------------------------------------------------

MT_RULES = ("never(*, teacher/*)", "blocked(consistency, teacher/*)")


def _bn_net(name: str) -> keras.Sequential:
    return keras.Sequential(
        [
            keras.Input((kit.OBS,)),
            keras.layers.Dense(4, activation="tanh", name="l1"),
            keras.layers.BatchNormalization(name="bn"),
            keras.layers.Dense(1, name="l2"),
        ],
        name=name,
    )


def _mean_teacher(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(9)
        student, teacher = _bn_net("student"), _bn_net("teacher")
        kit.copy_weights(teacher, student)
        opt = keras.optimizers.SGD(0.05)
        models = {"student": student, "teacher": teacher}
        pair = pair_models(teacher, student, tau=TAU)
        rec = Recorder(logdir, every_n_steps=1, models=models, pairs=[pair], rules=list(MT_RULES))

        def var_list():
            return student.trainable_variables + (teacher.trainable_variables if leaky else [])

        def losses(b):
            guess = teacher(b["s"] + 0.1 * b["s2"], training=False)
            if not leaky:
                guess = tf.stop_gradient(guess)
            pred = student(b["s"], training=True)
            return {
                "supervised": tf.reduce_mean(tf.square(pred - b["y"])),
                "consistency": tf.reduce_mean(tf.square(pred - guess)),
            }

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                named = losses(b)
            rec.apply(opt, rec.gradients(tape, named, var_list()))
            kit.polyak(teacher, student, TAU)
            rec.record_drift()

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                named = losses(b)
                supervised, consistency = named["supervised"], named["consistency"]
                loss = supervised + consistency
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
            kit.polyak(teacher, student, TAU)

        if watched:  # the summed loss's terms, each a loss of its own
            train_step = rec.watch(watched_step, losses={"loss": ["supervised", "consistency"]})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [
                        kit.loss_probe(n, kit.taped(lambda _, n=n: losses(b)[n]), opt, var_list)
                        for n in ("supervised", "consistency")
                    ],
                    kit.variables_of(models),
                    [opt],
                    [kit.pair_probe(pair, teacher, student, "teacher")],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- GAN, alternating steps ------------------------------------------------------------

GAN_RULES = (
    "never(d_loss, generator/*)",
    "never(g_loss, discriminator/*)",
    "only(g_loss, [generator])",
)
LATENT = 2


def _gan(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(10)
        gen = kit.mlp("generator", [4, kit.OBS], inputs=LATENT)
        disc = kit.mlp("discriminator", [4, 1])
        d_opt, g_opt = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
        models = {"generator": gen, "discriminator": disc}
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(GAN_RULES))

        def g_vars():
            return gen.trainable_variables + (disc.trainable_variables if leaky else [])

        def bce(logits, label):
            return tf.reduce_mean(
                tf.nn.sigmoid_cross_entropy_with_logits(
                    labels=tf.fill(tf.shape(logits), label), logits=logits
                )
            )

        def d_loss(b):
            fake = gen(b["noise"])
            return bce(disc(b["s"]), 1.0) + bce(disc(fake), 0.0)

        def g_loss(b):
            return bce(disc(gen(b["noise"])), 1.0)

        @tf.function
        def d_step(b):
            with rec.tape() as tape:
                loss = d_loss(b)
            rec.apply(d_opt, rec.gradients(tape, {"d_loss": loss}, disc.trainable_variables))

        @tf.function
        def g_step(b):
            with rec.tape() as tape:
                loss = g_loss(b)
            rec.apply(g_opt, rec.gradients(tape, {"g_loss": loss}, g_vars()))

        def watched_d_step(b):  # the steps as their user writes them, under @rec.watch
            with tf.GradientTape() as tape:
                loss = d_loss(b)
            variables = disc.trainable_variables
            d_opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        def watched_g_step(b):
            with tf.GradientTape() as tape:
                loss = g_loss(b)
            variables = g_vars()
            g_opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:  # two watched functions, called in turn: each call is a step
            d_step = rec.watch(watched_d_step, losses={"loss": "d_loss"})
            g_step = rec.watch(watched_g_step, losses={"loss": "g_loss"})

        for step in range(6):
            b = kit.batch(step)
            if step % 2 == 0:
                probe = kit.loss_probe(
                    "d_loss",
                    kit.taped(lambda _: d_loss(b)),
                    d_opt,
                    lambda: disc.trainable_variables,
                )
            else:
                probe = kit.loss_probe("g_loss", kit.taped(lambda _: g_loss(b)), g_opt, g_vars)
            observer.before(step, StepProbe([probe], kit.variables_of(models), [d_opt, g_opt]))
            (d_step if step % 2 == 0 else g_step)(b)
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "byol",
        TF_FUNCTION,
        _byol(False),
        BYOL_RULES,
        note="BYOL: EMA teacher computed before the tape opens",
    ),
    Shape(
        "byol_leaky",
        TF_FUNCTION,
        _byol(True),
        BYOL_RULES,
        mutant_of="byol",
        note="teacher inside the tape and in the optimizer",
    ),
    Shape(
        "mean_teacher",
        TF_FUNCTION,
        _mean_teacher(False),
        MT_RULES,
        note="Mean-Teacher: BatchNorm student, EMA teacher (moving statistics too) behind stop_gradient",
    ),
    Shape(
        "mean_teacher_leaky",
        TF_FUNCTION,
        _mean_teacher(True),
        MT_RULES,
        mutant_of="mean_teacher",
        note="no stop_gradient, teacher in the optimizer",
    ),
    Shape(
        "gan",
        TF_FUNCTION,
        _gan(False),
        GAN_RULES,
        steps=6,
        note="GAN: discriminator and generator steps alternate, two optimizers",
    ),
    Shape(
        "gan_leaky",
        TF_FUNCTION,
        _gan(True),
        GAN_RULES,
        steps=6,
        advice=("var_list",),
        mutant_of="gan",
        note="the generator's optimizer over both networks",
    ),
]


# The shapes written as their users write them, under `@rec.watch`
# (tests/e2e/corpus/test_watched_corpus.py; not corpus shapes of their own).
_BUILDERS = {"byol": _byol, "mean_teacher": _mean_teacher, "gan": _gan}
WATCHED = [
    watched_twin(
        shape, _BUILDERS[shape.mutant_of or shape.name](shape.mutant_of is not None, watched=True)
    )
    for shape in SHAPES
]
