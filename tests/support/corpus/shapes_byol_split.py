"""BYOL with one optimizer applied three times per step, to disjoint variable
lists (docs/RECIPES.md, BYOL: one optimizer applied to several variable lists).

- byol_split_applies (tf.function): encoder, projector and predictor learn
  from one tape's gradient, applied by one optimizer in three
  `apply_gradients` calls (so `optimizer.iterations` advances 3 per step, as
  the original code has it); the gradient is recorded once by
  `rec.record_gradients` inside a `training_step()` block around the three
  applies. The target encoder and projector are computed before the tape and
  follow by Polyak averaging after the block.
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from tb_gradscope.record import Recorder
from tests.support.corpus import kit
from tests.support.corpus.spec import TF_FUNCTION, Shape, StepProbe

TAU = 0.05
RULES = ("only(byol, [encoder, projector, predictor])", "blocked(byol, target_*)")


def _cosine_loss(p, z):
    return tf.reduce_mean(
        2.0 - 2.0 * tf.reduce_sum(tf.math.l2_normalize(p, 1) * tf.math.l2_normalize(z, 1), 1)
    )


def _split_applies(watched: bool = False):
    def train(logdir, observer):
        kit.seed(9)
        encoder, target_encoder = kit.mlp("encoder", [5, 4]), kit.mlp("target_encoder", [5, 4])
        projector, target_projector = (
            kit.mlp("projector", [3], inputs=4),
            kit.mlp("target_projector", [3], inputs=4),
        )
        predictor = kit.mlp("predictor", [3], inputs=3)
        kit.copy_weights(target_encoder, encoder)
        kit.copy_weights(target_projector, projector)
        opt = keras.optimizers.Adam(0.01)

        def parts():
            return [
                encoder.trainable_variables,
                projector.trainable_variables,
                predictor.trainable_variables,
            ]

        opt.build([v for part in parts() for v in part])
        models = {
            "encoder": encoder,
            "projector": projector,
            "predictor": predictor,
            "target_encoder": target_encoder,
            "target_projector": target_projector,
        }
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(RULES))

        def teacher(b):
            return target_projector(target_encoder(b["s2"]))

        def byol_loss(b, z):
            return _cosine_loss(predictor(projector(encoder(b["s"]))), z)

        @tf.function
        def train_step(b):
            z = teacher(b)
            with tf.GradientTape() as tape:
                loss = byol_loss(b, z)
            grads = tape.gradient(loss, parts())
            with rec.training_step():
                rec.record_gradients(
                    {"byol": [gv for g, v in zip(grads, parts()) for gv in zip(g, v)]},
                    losses={"byol": loss},
                    tape=tape,
                )
                for part_grads, part in zip(grads, parts()):
                    opt.apply_gradients(zip(part_grads, part))
            kit.polyak(target_encoder, encoder, TAU)
            kit.polyak(target_projector, projector, TAU)

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            z = teacher(b)
            with tf.GradientTape() as tape:
                loss = byol_loss(b, z)
            grads = tape.gradient(loss, parts())
            for part_grads, part in zip(grads, parts()):
                opt.apply_gradients(zip(part_grads, part))
            kit.polyak(target_encoder, encoder, TAU)
            kit.polyak(target_projector, projector, TAU)

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
                            kit.taped(lambda z: byol_loss(b, z), lambda: teacher(b)),
                            opt,
                            lambda: [v for part in parts() for v in part],
                        )
                    ],
                    kit.variables_of(models),
                    [opt],
                ),
            )
            train_step(b)
            observer.after(step)
        assert int(opt.iterations.numpy()) == 3 * 4 and int(rec.step.numpy()) == 4
        rec.close()

    return train


SHAPES = [
    Shape(
        "byol_split_applies",
        TF_FUNCTION,
        _split_applies(),
        RULES,
        note="BYOL, one optimizer applied to encoder, projector and predictor in turn; "
        "record_gradients inside training_step()",
    ),
]


# The shape written as its users write it, under `@rec.watch`
# (tests/e2e/corpus/test_watched_corpus.py; not a corpus shape of its own).
WATCHED = [
    dataclasses.replace(
        SHAPES[0],
        name="byol_split_applies_watched",
        train=_split_applies(watched=True),
        drift_from_start=True,  # a watched call reads the pairs at its start
    )
]
