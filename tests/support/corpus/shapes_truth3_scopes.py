"""Truth on unseen code, round 3 (issue 57): every network its own scopes.

- fit_clone_ema: a mean teacher as Keras code writes one: a `keras.Model`
  subclass holding its online network and an EMA copy made by
  `keras.models.clone_model` (the same model and layer names) as
  `online_network` and `ema_network`, trained by `fit` with the callback; a
  custom `train_step` fits the labels and the EMA's predictions on a
  perturbed view behind `tf.stop_gradient`, then moves the EMA. Mutant: no
  `stop_gradient`, and the optimizer given the EMA's variables too (the loss
  trains the EMA). The two networks must be two scopes (`mt/online_network`,
  `mt/ema_network`): folded into one, the mutant reads exactly as the correct run.
- fit_per_sample_loss: a custom `train_step` differentiating a per-sample loss
  vector (`tape.gradient` of a [batch] tensor): recorded as its sum.
- tf1_ema_teacher: a TF1 mean teacher whose teacher is the student's
  `tf.train.ExponentialMovingAverage` shadows (`ema.average(w)`), its logits
  behind `tf.stop_gradient` in the consistency loss; the shadows are scopes
  (`ema/student/...`), so `never(cons, ema/*)` can be stated; the EMA is
  applied in a run call of its own after the optimizer's. Mutant: no
  `stop_gradient` and the shadows in the optimizer's `var_list` (the
  consistency loss trains the EMA).

The oracle's variable names are written out here (`<root>/<attribute>/<Keras
path>`, `ema/<source>`), not computed by `oracle.named_variables`, which names
sub-models by their model names and would fold the clone too.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.integrations.keras import GradscopeCallback
from tests.support.corpus import kit
from tests.support.corpus.shapes_keras import _Watch
from tests.support.corpus.spec import KERAS_FIT, TF1_SESSION, Forward, Shape, StepProbe

STEPS = 4

# ----- a mean teacher whose EMA is a clone_model copy ----------------------------

CLONE_RULES = ("never(loss, mt/ema_network/*)", "only(loss, [mt/online_network])")
EMA_DECAY = 0.9
NOISE = 0.3


def _encoder() -> keras.Model:
    x = keras.Input((kit.OBS,))
    h = keras.layers.Dense(4, activation="tanh", name="hidden")(x)
    return keras.Model(x, keras.layers.Dense(1, name="out")(h), name="encoder")


class MeanTeacher(keras.Model):
    def __init__(self, leaky: bool):
        super().__init__(name="mt")
        self.leaky = leaky
        self.online_network = _encoder()
        self.ema_network = keras.models.clone_model(self.online_network)
        self.ema_network.set_weights(self.online_network.get_weights())

    def call(self, x):
        return self.online_network(x)

    def loss_of(self, x, y):
        pred = self.online_network(x)
        teacher = self.ema_network(x + NOISE * tf.sin(x))  # the teacher sees a perturbed view
        if not self.leaky:
            teacher = tf.stop_gradient(teacher)
        return tf.reduce_mean((pred - y) ** 2) + tf.reduce_mean((pred - teacher) ** 2)

    def trained_variables(self):
        return self.online_network.trainable_variables + (
            self.ema_network.trainable_variables if self.leaky else []
        )

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.loss_of(x, y)
        grads = tape.gradient(loss, self.trained_variables())
        self.optimizer.apply_gradients(zip(grads, self.trained_variables()))
        for t, o in zip(self.ema_network.weights, self.online_network.weights):
            t.assign(EMA_DECAY * t + (1.0 - EMA_DECAY) * o)
        return {"loss": loss}


def _clone_names(model: MeanTeacher) -> dict:
    """{product name: variable}, written out: each network under the attribute holding it."""
    out = {}
    for attribute in ("online_network", "ema_network"):
        for v in getattr(model, attribute).weights:
            out[f"mt/{attribute}/{v.path}"] = v
    return out


def _fit_clone_ema(leaky: bool):
    def train(logdir, observer):
        kit.seed(57)
        model = MeanTeacher(leaky)
        opt = keras.optimizers.Adam(0.02)
        model.compile(opt)
        b = kit.batch(0)
        x, y = b["s"], b["y"]

        def forward():
            with tf.GradientTape() as tape:
                value = model.loss_of(x, y)
            return Forward(tape, value)

        def probe():
            return StepProbe(
                [kit.loss_probe("loss", forward, opt, model.trained_variables)],
                _clone_names(model),
                [opt],
            )

        callback = GradscopeCallback(logdir, every_n_batches=1, rules=list(CLONE_RULES))
        dataset = tf.data.Dataset.from_tensors((x, y)).repeat(STEPS)
        model.fit(dataset, epochs=1, verbose=0, callbacks=[_Watch(observer, probe), callback])
        callback.detach()

    return train


# ----- a custom train_step differentiating a per-sample loss --------------------

PER_SAMPLE_RULES = ("only(loss_0, [ps/net])",)


class PerSample(keras.Model):
    def __init__(self):
        super().__init__(name="ps")
        self.net = kit.mlp("net", [4, 1])

    def call(self, x):
        return self.net(x)

    def per_sample(self, x, y):
        return tf.reduce_sum((self.net(x) - y) ** 2, axis=1)  # [batch], not reduced

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            loss = self.per_sample(x, y)
        grads = tape.gradient(loss, self.net.trainable_variables)  # of its sum
        self.optimizer.apply_gradients(zip(grads, self.net.trainable_variables))
        return {"loss": tf.reduce_mean(loss)}


def _fit_per_sample(logdir, observer):
    kit.seed(59)
    model = PerSample()
    opt = keras.optimizers.SGD(0.05)
    model.compile(opt)
    b = kit.batch(0)
    x, y = b["s"], b["y"]

    def forward():
        with tf.GradientTape() as tape:
            value = model.per_sample(x, y)
        return Forward(tape, value)

    def probe():
        return StepProbe(
            [kit.loss_probe("loss_0", forward, opt, lambda: model.net.trainable_variables)],
            kit.variables_of({"ps": model}),
            [opt],
        )

    callback = GradscopeCallback(logdir, every_n_batches=1, rules=list(PER_SAMPLE_RULES))
    dataset = tf.data.Dataset.from_tensors((x, y)).repeat(STEPS)
    model.fit(dataset, epochs=1, verbose=0, callbacks=[_Watch(observer, probe), callback])
    callback.detach()


# ----- TF1 mean teacher: the teacher is tf.train.ExponentialMovingAverage shadows ------

EMA_RULES = ("never(cons, ema/*)", "only(cons, [student])")


def _tf1_ema_teacher(leaky: bool):
    def train(logdir, observer):
        from tb_gradscope.pairs import pair_ema

        v1 = tf.compat.v1
        graph = tf.Graph()
        with graph.as_default():
            v1.set_random_seed(13)
            s = v1.placeholder(tf.float32, [None, kit.OBS], "s")
            y = v1.placeholder(tf.float32, [None, 1], "y")
            with v1.variable_scope("student"):
                w1 = v1.get_variable("l1/w", [kit.OBS, 4], use_resource=True)
                w2 = v1.get_variable("l2/w", [4, 1], use_resource=True)
            student = v1.trainable_variables("student")
            ema = v1.train.ExponentialMovingAverage(decay=0.9)
            apply_ema = ema.apply(student)

            def logits(a, b, x=s):
                return tf.matmul(tf.tanh(tf.matmul(x, a)), b)

            # The teacher sees a perturbed view (equal weights at step 0 would give cons no gradient).
            teacher = logits(ema.average(w1), ema.average(w2), s + NOISE * tf.sin(s))
            if not leaky:
                teacher = tf.stop_gradient(teacher)
            fit = tf.reduce_mean((logits(w1, w2) - y) ** 2)
            cons = tf.reduce_mean((logits(w1, w2) - teacher) ** 2)
            shadow_vars = [ema.average(v) for v in student]
            opt = v1.train.AdamOptimizer(0.05).minimize(
                fit + cons, var_list=student + (shadow_vars if leaky else [])
            )
            init = v1.global_variables_initializer()
            shadows = {
                ema.average(v).name[:-2]: "ema/" + v.name[:-2] for v in student
            }  # the pair's names

        def feed(step: int) -> dict:
            rng = np.random.default_rng(5800 + step)
            return {
                s: rng.normal(size=(kit.BATCH, kit.OBS)).astype(np.float32),
                y: rng.normal(size=(kit.BATCH, 1)).astype(np.float32),
            }

        kit.tf1_loop(
            logdir,
            observer,
            graph,
            losses={"cons": cons},  # the supervised term is trained, not recorded
            train_ops={"cons": opt},
            rules=EMA_RULES,
            start=[init],
            steps=STEPS,
            feed=feed,
            step=lambda run, _step, fed: (run.run(opt, fed), run.run(apply_ema)),
            pairs=lambda: [pair_ema(ema, student)],
            names=shadows,
        )

    return train


SHAPES = [
    Shape(
        "fit_clone_ema",
        KERAS_FIT,
        _fit_clone_ema(False),
        CLONE_RULES,
        note="Keras fit, mean teacher: online_network and a clone_model EMA (same names) held side by "
        "side, the EMA's predictions behind stop_gradient",
    ),
    Shape(
        "fit_clone_ema_leaky",
        KERAS_FIT,
        _fit_clone_ema(True),
        CLONE_RULES,
        mutant_of="fit_clone_ema",
        note="no stop_gradient, the optimizer given the EMA's variables: the loss trains the EMA",
    ),
    Shape(
        "fit_per_sample_loss",
        KERAS_FIT,
        _fit_per_sample,
        PER_SAMPLE_RULES,
        note="Keras fit, a custom train_step differentiating a per-sample loss vector: recorded as its sum",
    ),
    Shape(
        "tf1_ema_teacher",
        TF1_SESSION,
        _tf1_ema_teacher(False),
        EMA_RULES,
        note="TF1 mean teacher: the teacher's logits from tf.train.ExponentialMovingAverage shadows, "
        "behind stop_gradient; the shadows are scopes (ema/...)",
    ),
    Shape(
        "tf1_ema_teacher_leaky",
        TF1_SESSION,
        _tf1_ema_teacher(True),
        EMA_RULES,
        mutant_of="tf1_ema_teacher",
        note="no stop_gradient on the teacher's logits and the shadows in the optimizer's "
        "var_list: the consistency loss trains the EMA",
    ),
]
