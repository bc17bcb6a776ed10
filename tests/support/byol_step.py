"""A BYOL-style training step with a classification head, shared by the
ResNet-50 fixture (tests/support/frontend_resnet.py) and doctor's small BatchNorm twin
(tests/unit/commands/test_doctor_trainable.py): two losses on the online network (`cls` of
the head, `byol` of the predictor regressed onto the target's features behind
`tf.stop_gradient`), one optimizer, the target an EMA of every online weight."""

from __future__ import annotations


def byol_step(rec, online, target, head, predictor, optimizer, tau: float):
    """The traced step `step(images, labels) -> (cls, byol)` under `rec` (a Recorder)."""
    import keras
    import tensorflow as tf

    variables = (
        online.trainable_variables + head.trainable_variables + predictor.trainable_variables
    )

    @tf.function
    def step(x, labels):
        with rec.tape() as tape:
            features = online(x, training=True)
            cls = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(
                    labels, head(features), from_logits=True
                )
            )
            anchor = tf.stop_gradient(tf.math.l2_normalize(target(x, training=False), axis=1))
            guess = tf.math.l2_normalize(predictor(features), axis=1)
            byol = tf.reduce_mean(tf.reduce_sum(tf.square(guess - anchor), axis=1))
        grads_and_vars = rec.gradients(tape, {"cls": cls, "byol": byol}, variables)
        rec.apply(optimizer, [(g, v) for g, v in grads_and_vars if g is not None])
        for t, o in zip(target.weights, online.weights):
            t.assign((1.0 - tau) * t + tau * o)
        rec.record_drift()
        return cls, byol

    return step
