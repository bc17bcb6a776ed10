"""Shapes of issue 57's doctor items: what a correct design looks like to
doctor, and the leaks it must name without rules.

- distill_wide_teacher (tf.function): knowledge distillation, a teacher wider
  than its student (so no shape match pairs them), its logits behind
  tf.stop_gradient, only the student in the var_list; a task loss and a
  distillation loss. Mutants: `_leaky`, the teacher without stop_gradient and
  in the var_list (distill trains the teacher); `_swapped`, the attribute
  called `teacher` is the model trained, the one called `student` is
  reached by distill's gradient and applied by no optimizer (item 1, item 4).
- multitask_heads (tf.function): a trunk with two task heads, one optimizer
  over all of them. Mutant: head_b left out of the var_list, so it gets
  task_b's gradient and never trains (item 4).
- vq (tf.function): a vector quantizer with a straight-through estimator: a
  reconstruction loss through `z + stop_gradient(q - z)`, a codebook loss
  `|sg(z) - q|^2` and a commitment loss `|z - sg(q)|^2`, one optimizer.
  Mutant: the commitment's stop_gradient removed, so it trains the codebook
  (item 5).
- eager_ac_pi_v (eager, no FlowGraph): a shared-trunk actor-critic whose heads
  are called `pi` and `v` (not after the losses `actor` and `critic`). Mutant:
  the advantage without stop_gradient, so the actor trains `v` (item 6).
- eager_ac_analyzed_copy (eager): the same loop given its FlowGraph by
  `rec.analyze` of a copy of the step that cuts the advantage, while the loop
  it runs does not: the measured gradients contradict the FlowGraph (item 6).
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tb_gradscope.record import Recorder
from tests.support.corpus import kit
from tests.support.corpus.spec import EAGER, TF_FUNCTION, Shape, StepProbe, watched_twin

A, OBS = kit.ACTIONS, kit.OBS
TEMPERATURE = 2.0


def _probe(losses, models, optimizers):
    return StepProbe(losses, kit.variables_of(models), optimizers)


# ----- distillation with a wider teacher ---------------------------------------------

DISTILL_RULES = (
    "never(*, teacher/*)",
    "updates(task, student/*)",
    "updates(distill, student/*)",
)


def _kl(teacher_logits, student_logits):
    p = tf.nn.softmax(teacher_logits / TEMPERATURE)
    return tf.reduce_mean(
        tf.reduce_sum(
            p * (tf.math.log(p + 1e-8) - tf.nn.log_softmax(student_logits / TEMPERATURE)), axis=1
        )
    )


def _distill(mode: str, watched: bool = False):
    """mode: "correct", "leaky" (the teacher trained by distill) or "swapped"
    (the model held as `teacher` is the one trained)."""

    def train(logdir, observer):
        kit.seed(41)
        wide, small = kit.mlp("teacher", [8, 6, A]), kit.mlp("student", [3, A])
        if mode == "swapped":  # the attributes swapped: `teacher` holds the small model
            wide, small = kit.mlp("student", [8, 6, A]), kit.mlp("teacher", [3, A])
            teacher, student = small, wide
        else:
            teacher, student = wide, small
        opt = keras.optimizers.Adam(0.01)
        models = {"teacher": teacher, "student": student}
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(DISTILL_RULES))

        def var_list():
            if mode == "leaky":
                return student.trainable_variables + teacher.trainable_variables
            if mode == "swapped":  # meant as "the student", trains the model held as teacher
                return teacher.trainable_variables
            return student.trainable_variables

        def losses(b):
            if mode == "swapped":  # the code reads: the teacher learns, the student teaches
                learner, fixed = teacher(b["s"]), student(b["s"])
                return {
                    "task": tf.reduce_mean(
                        tf.keras.losses.sparse_categorical_crossentropy(
                            b["a"], learner, from_logits=True
                        )
                    ),
                    "distill": _kl(fixed, learner),
                }
            t_logits = teacher(b["s"])
            if mode == "correct":
                t_logits = tf.stop_gradient(t_logits)
            s_logits = student(b["s"])
            return {
                "task": tf.reduce_mean(
                    tf.keras.losses.sparse_categorical_crossentropy(
                        b["a"], s_logits, from_logits=True
                    )
                ),
                "distill": _kl(t_logits, s_logits),
            }

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                named = losses(b)
            rec.apply(opt, rec.gradients(tape, named, var_list()))

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                named = losses(b)
                task, distill = named["task"], named["distill"]
                loss = task + distill
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:  # the summed loss's terms, each a loss of its own
            train_step = rec.watch(watched_step, losses={"loss": ["task", "distill"]})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            n, kit.taped(lambda _, n=n, b=b: losses(b)[n]), opt, var_list
                        )
                        for n in ("task", "distill")
                    ],
                    models,
                    [opt],
                ),
            )
            train_step(b)
            observer.after(step + 1)
        rec.close()

    return train


# ----- a multi-task head left out of the var_list --------------------------------------

MULTITASK_RULES = (
    "updates(task_a, [net/trunk, net/head_a])",
    "updates(task_b, [net/trunk, net/head_b])",
    "never(task_a, net/head_b)",
    "never(task_b, net/head_a)",
)


def _multitask(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(42)
        x = keras.Input((OBS,))
        h = keras.layers.Dense(4, activation="tanh", name="trunk")(x)
        net = keras.Model(
            x,
            [keras.layers.Dense(1, name="head_a")(h), keras.layers.Dense(1, name="head_b")(h)],
            name="net",
        )
        opt = keras.optimizers.SGD(0.05)
        models = {"net": net}
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(MULTITASK_RULES))

        def var_list():
            out = net.get_layer("trunk").trainable_variables
            out += net.get_layer("head_a").trainable_variables
            if not leaky:  # the mutant forgets head_b
                out += net.get_layer("head_b").trainable_variables
            return out

        def losses(b):
            ya, yb = net(b["s"])
            return {
                "task_a": tf.reduce_mean(tf.square(ya - b["y"])),
                "task_b": tf.reduce_mean(tf.square(yb + b["y"])),
            }

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                named = losses(b)
            rec.apply(opt, rec.gradients(tape, named, var_list()))

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                named = losses(b)
                task_a, task_b = named["task_a"], named["task_b"]
                loss = task_a + task_b
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:  # the summed loss's terms, each a loss of its own
            train_step = rec.watch(watched_step, losses={"loss": ["task_a", "task_b"]})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            n, kit.taped(lambda _, n=n, b=b: losses(b)[n]), opt, var_list
                        )
                        for n in ("task_a", "task_b")
                    ],
                    models,
                    [opt],
                ),
            )
            train_step(b)
            observer.after(step + 1)
        rec.close()

    return train


# ----- a vector quantizer with a straight-through estimator ------------------------------

VQ_RULES = (
    "never(recon, vq/*)",
    "never(commit, vq/*)",
    "never(codebook, encoder/*)",
    "never(codebook, decoder/*)",
)
CODES, DIM, BETA = 4, 2, 0.25


class Codebook(keras.layers.Layer):
    """The codebook of a vector quantizer: `CODES` vectors of `DIM` numbers."""

    def build(self, input_shape):
        self.codes = self.add_weight(
            name="codes", shape=(CODES, DIM), initializer=keras.initializers.RandomNormal(seed=5)
        )

    def call(self, z):
        distances = tf.reduce_sum(tf.square(z[:, None, :] - self.codes[None]), axis=2)
        return tf.gather(self.codes, tf.argmin(distances, axis=1))


def _vq(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(43)
        encoder = kit.mlp("encoder", [4, DIM])
        decoder = kit.mlp("decoder", [4, OBS], inputs=DIM)
        vq = keras.Sequential([keras.Input((DIM,)), Codebook(name="quantizer")], name="vq")
        opt = keras.optimizers.Adam(0.01)
        models = {"encoder": encoder, "vq": vq, "decoder": decoder}
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(VQ_RULES))

        def var_list():
            return (
                encoder.trainable_variables + vq.trainable_variables + decoder.trainable_variables
            )

        def losses(b):
            z = encoder(b["s"])
            q = vq(z)
            z_q = z + tf.stop_gradient(q - z)  # straight-through: the decoder's gradient to z
            committed = q if leaky else tf.stop_gradient(q)
            return {
                "recon": tf.reduce_mean(tf.square(decoder(z_q) - b["s"])),
                "codebook": tf.reduce_mean(tf.square(tf.stop_gradient(z) - q)),
                "commit": BETA * tf.reduce_mean(tf.square(z - committed)),
            }

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                named = losses(b)
            rec.apply(opt, rec.gradients(tape, named, var_list()))

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                named = losses(b)
                recon, codebook, commit = named["recon"], named["codebook"], named["commit"]
                loss = recon + codebook + commit
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:  # the summed loss's terms, each a loss of its own
            train_step = rec.watch(watched_step, losses={"loss": ["recon", "codebook", "commit"]})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            n, kit.taped(lambda _, n=n, b=b: losses(b)[n]), opt, var_list
                        )
                        for n in ("recon", "codebook", "commit")
                    ],
                    models,
                    [opt],
                ),
            )
            train_step(b)
            observer.after(step + 1)
        rec.close()

    return train


# ----- an eager actor-critic whose heads are not named after its losses -------------------

AC_RULES = ("never(actor, ac/v)", "never(critic, ac/pi)")
GAMMA = 0.9


def _eager_ac(leaky: bool, analyze_copy: bool = False, watched: bool = False):
    def train(logdir, observer):
        kit.seed(44)
        x = keras.Input((OBS,))
        h = keras.layers.Dense(5, activation="tanh", name="trunk")(x)
        ac = keras.Model(
            x, [keras.layers.Dense(A, name="pi")(h), keras.layers.Dense(1, name="v")(h)], name="ac"
        )
        opt = keras.optimizers.SGD(0.05)
        rec = Recorder(logdir, every_n_steps=1, models={"ac": ac}, rules=list(AC_RULES))

        def losses(b, cut: bool):
            logits, value = ac(b["s"])
            logp = tf.gather(tf.nn.log_softmax(logits), b["a"], batch_dims=1)
            returns = b["r"] + GAMMA * b["done"]
            advantage = returns - value[:, 0]
            if cut:
                advantage = tf.stop_gradient(advantage)
            return {
                "actor": -tf.reduce_mean(logp * advantage),
                "critic": tf.reduce_mean(tf.square(returns - value[:, 0])),
            }

        def step_of(cut: bool):
            def step(b):
                with rec.tape() as tape:
                    named = losses(b, cut)
                rec.apply(opt, rec.gradients(tape, named, ac.trainable_variables))

            def watched_step(b):  # as its user writes it, under @rec.watch(eager=True)
                with tf.GradientTape() as tape:
                    named = losses(b, cut)
                    actor, critic = named["actor"], named["critic"]
                    loss = actor + critic
                variables = ac.trainable_variables
                opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

            if watched:  # the summed loss's terms, each a loss of its own
                return rec.watch(watched_step, eager=True, losses={"loss": ["actor", "critic"]})
            return step

        if analyze_copy:  # the step analyzed is a copy that cuts; the loop run does not
            rec.analyze(step_of(True), kit.batch(0))
        run = step_of(not leaky)
        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            n,
                            kit.taped(lambda _, n=n, b=b: losses(b, not leaky)[n]),
                            opt,
                            lambda: ac.trainable_variables,
                        )
                        for n in ("actor", "critic")
                    ],
                    {"ac": ac},
                    [opt],
                ),
            )
            run(b)
            observer.after(step + 1)
        rec.close()

    return train


SHAPES = [
    Shape(
        "distill_wide_teacher",
        TF_FUNCTION,
        _distill("correct"),
        DISTILL_RULES,
        note="distillation, a teacher wider than its student behind stop_gradient, only the "
        "student in the var_list",
    ),
    Shape(
        "distill_wide_teacher_leaky",
        TF_FUNCTION,
        _distill("leaky"),
        DISTILL_RULES,
        mutant_of="distill_wide_teacher",
        note="the teacher inside the tape without stop_gradient and in the var_list: distill "
        "trains the teacher",
    ),
    Shape(
        "distill_swapped",
        TF_FUNCTION,
        _distill("swapped"),
        DISTILL_RULES,
        mutant_of="distill_wide_teacher",
        note="teacher and student swapped: the model held as `teacher` is trained, the one held "
        "as `student` gets distill's gradient and never trains",
    ),
    Shape(
        "multitask_heads",
        TF_FUNCTION,
        _multitask(False),
        MULTITASK_RULES,
        note="a trunk with two task heads, one optimizer over all of them",
    ),
    Shape(
        "multitask_head_left_out",
        TF_FUNCTION,
        _multitask(True),
        MULTITASK_RULES,
        mutant_of="multitask_heads",
        advice=("var_list",),
        note="head_b left out of the var_list: it gets task_b's gradient and never trains",
    ),
    Shape(
        "vq",
        TF_FUNCTION,
        _vq(False),
        VQ_RULES,
        note="vector quantizer: straight-through reconstruction, codebook and commitment losses",
    ),
    Shape(
        "vq_commit_leaky",
        TF_FUNCTION,
        _vq(True),
        VQ_RULES,
        mutant_of="vq",
        advice=("stop_gradient",),
        note="the commitment loss without its stop_gradient: it trains the codebook",
    ),
    Shape(
        "eager_ac_pi_v",
        EAGER,
        _eager_ac(False),
        AC_RULES,
        has_flowgraph=False,
        note="eager shared-trunk actor-critic, heads `pi` and `v`, never traced",
    ),
    Shape(
        "eager_ac_pi_v_leaky",
        EAGER,
        _eager_ac(True),
        AC_RULES,
        has_flowgraph=False,
        mutant_of="eager_ac_pi_v",
        note="the advantage without stop_gradient: the actor trains `v`",
    ),
    Shape(
        "eager_ac_analyzed_copy",
        EAGER,
        _eager_ac(False, analyze_copy=True),
        AC_RULES,
        note="the eager actor-critic given its FlowGraph by rec.analyze of the step it runs",
    ),
    Shape(
        "eager_ac_analyzed_copy_leaky",
        EAGER,
        _eager_ac(True, analyze_copy=True),
        AC_RULES,
        mutant_of="eager_ac_analyzed_copy",
        note="rec.analyze traced a copy that cuts the advantage, the loop run does not: the "
        "measured gradients contradict the FlowGraph",
    ),
]


# The shapes written as their users write them, under `@rec.watch`
# (tests/e2e/corpus/test_watched_corpus.py; not corpus shapes of their own).
# The eager actor-critics stay eager (`@rec.watch(eager=True)`);
# eager_ac_analyzed_copy's FlowGraph comes from `rec.analyze` of a watched copy
# of the step that cuts the advantage.
_BUILDERS = {
    "distill_wide_teacher": lambda: _distill("correct", watched=True),
    "distill_wide_teacher_leaky": lambda: _distill("leaky", watched=True),
    "distill_swapped": lambda: _distill("swapped", watched=True),
    "multitask_heads": lambda: _multitask(False, watched=True),
    "multitask_head_left_out": lambda: _multitask(True, watched=True),
    "vq": lambda: _vq(False, watched=True),
    "vq_commit_leaky": lambda: _vq(True, watched=True),
    "eager_ac_pi_v": lambda: _eager_ac(False, watched=True),
    "eager_ac_pi_v_leaky": lambda: _eager_ac(True, watched=True),
    "eager_ac_analyzed_copy": lambda: _eager_ac(False, analyze_copy=True, watched=True),
    "eager_ac_analyzed_copy_leaky": lambda: _eager_ac(True, analyze_copy=True, watched=True),
}
WATCHED = [watched_twin(shape, _BUILDERS[shape.name]()) for shape in SHAPES]
