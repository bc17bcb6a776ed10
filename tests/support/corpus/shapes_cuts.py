"""Per-path cuts: SimSiam, symmetric and one-sided.

SimSiam (tf.function): two views of a batch through one encoder; the loss is
symmetric, each view's prediction against the other view's embedding behind
tf.stop_gradient. The encoder learns through the predictor only: its direct
path into the loss is cut, though its cell is `updates`. Mutant: the
stop_gradient forgotten (the encoder then learns through both paths, and
collapses in practice); cells, cuts of whole scopes and gradient norms cannot
tell it from the correct code, only the per-path cut can.
One-sided (BYOL/SimSiam style, predictor on one side only): the prediction of
view 1 against view 2's embedding behind stop_gradient; the encoder call on
view 2 is cut whole, the encoder still learns through view 1.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tb_gradscope.record import Recorder
from tests.support.corpus import kit
from tests.support.corpus.spec import TF_FUNCTION, Shape, StepProbe, watched_twin

SIMSIAM_RULES = (
    "blocked(simsiam, encoder/*, except_via=predictor)",
    "only(simsiam, [encoder, predictor])",
)


def _negative_cosine(p, z):
    p = tf.math.l2_normalize(p, axis=1)
    z = tf.math.l2_normalize(z, axis=1)
    return -tf.reduce_mean(tf.reduce_sum(p * z, axis=1))


def _simsiam(leaky: bool, symmetric: bool = True, watched: bool = False):
    def train(logdir, observer):
        kit.seed(21 if symmetric else 22)
        encoder = kit.mlp("encoder", [5, 3])
        predictor = kit.mlp("predictor", [4, 3], inputs=3)
        opt = keras.optimizers.SGD(0.05)
        models = {"encoder": encoder, "predictor": predictor}
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(SIMSIAM_RULES))

        def var_list():
            return encoder.trainable_variables + predictor.trainable_variables

        target = (lambda t: t) if leaky else tf.stop_gradient

        def simsiam_loss(b):
            x1, x2 = b["s"], b["s"] + 0.3 * b["s2"]  # two augmented views
            z1, z2 = encoder(x1), encoder(x2)
            loss = _negative_cosine(predictor(z1), target(z2))
            if symmetric:
                loss = 0.5 * loss + 0.5 * _negative_cosine(predictor(z2), target(z1))
            return loss

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                loss = simsiam_loss(b)
            rec.apply(opt, rec.gradients(tape, {"simsiam": loss}, var_list()))

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                loss = simsiam_loss(b)
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:
            train_step = rec.watch(watched_step, losses={"loss": "simsiam"})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [
                        kit.loss_probe(
                            "simsiam", kit.taped(lambda _: simsiam_loss(b)), opt, var_list
                        )
                    ],
                    kit.variables_of(models),
                    [opt],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "simsiam",
        TF_FUNCTION,
        _simsiam(False),
        SIMSIAM_RULES,
        note="SimSiam: symmetric loss, each side's embedding behind stop_gradient, the encoder learns "
        "through the predictor only",
    ),
    Shape(
        "simsiam_leaky",
        TF_FUNCTION,
        _simsiam(True),
        SIMSIAM_RULES,
        mutant_of="simsiam",
        advice=("stop_gradient",),
        note="no stop_gradient: the encoder also learns by the direct path",
    ),
    Shape(
        "simsiam_one_sided",
        TF_FUNCTION,
        _simsiam(False, symmetric=False),
        SIMSIAM_RULES,
        note="BYOL/SimSiam style: the predictor on one side only, the other view behind stop_gradient",
    ),
]


# The shapes written as their users write them, under `@rec.watch`
# (tests/e2e/corpus/test_watched_corpus.py; not corpus shapes of their own).
WATCHED = [
    watched_twin(
        shape,
        _simsiam(shape.name == "simsiam_leaky", shape.name != "simsiam_one_sided", watched=True),
    )
    for shape in SHAPES
]
