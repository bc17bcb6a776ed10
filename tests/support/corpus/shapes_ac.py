"""Actor-critic shapes: DDPG, TD3, SAC, a shared-trunk actor-critic, A2C.

DDPG (tf.function, one `rec.training_step()`): the critic's backup is computed
before the critic tape opens, two tapes, two optimizers, Polyak targets;
mutant: the backup inside the critic tape without stop_gradient.
TD3 (eager block around two tf.functions, actor every 2nd step): twin critics
with one optimizer, backup behind stop_gradient inside the tape; mutant: the
actor's optimizer also given critic1 (the actor loss moves the critic).
SAC (tf.function): twin Q, a policy sampled with fixed noise, an entropy
temperature with its own optimizer; one stop_gradient on the backup cuts
target_q1, target_q2, pi and alpha; mutant: the temperature loss without
stop_gradient on log pi.
Shared-trunk actor-critic (tf.function, one summed loss, one optimizer);
mutant: the advantage without stop_gradient.
A2C (tf.function, one persistent tape, two optimizers); mutant: the advantage
without stop_gradient.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.pairs import pair_models
from tb_gradscope.record import Recorder
from tests.support.corpus import kit
from tests.support.corpus.spec import EAGER, TF_FUNCTION, Shape, StepProbe, watched_twin

GAMMA, TAU, A, OBS = 0.9, 0.05, kit.ACTIONS, kit.OBS


def _q(net, s, a):
    return net(tf.concat([s, a], axis=1))[:, 0]


def _probe(losses, models, optimizers, pairs=()):
    return StepProbe(losses, kit.variables_of(models), optimizers, pairs)


# ----- DDPG --------------------------------------------------------------------

DDPG_RULES = (
    "never(critic, actor/*)",
    "never(actor, critic/*)",
    "never(*, target_*)",
    "blocked(critic, target_critic/*)",
    "blocked(critic, target_actor/*)",
)


def _ddpg(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(3)
        actor, t_actor = kit.mlp("actor", [4, A]), kit.mlp("target_actor", [4, A])
        critic, t_critic = (
            kit.mlp("critic", [4, 1], OBS + A),
            kit.mlp("target_critic", [4, 1], OBS + A),
        )
        kit.copy_weights(t_actor, actor)
        kit.copy_weights(t_critic, critic)
        a_opt, c_opt = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
        models = {
            "actor": actor,
            "critic": critic,
            "target_actor": t_actor,
            "target_critic": t_critic,
        }
        pairs = [pair_models(t_actor, actor, tau=TAU), pair_models(t_critic, critic, tau=TAU)]
        rec = Recorder(logdir, every_n_steps=1, models=models, pairs=pairs, rules=list(DDPG_RULES))

        def backup(b):
            a2 = tf.tanh(t_actor(b["s2"]))
            return b["r"] + GAMMA * (1.0 - b["done"]) * _q(t_critic, b["s2"], a2)

        def critic_loss(b, y):
            if y is None:  # the mutant: the backup inside the tape, no stop_gradient
                y = backup(b)
            return tf.reduce_mean(tf.square(_q(critic, b["s"], b["a_cont"]) - y))

        def actor_loss(b):
            return -tf.reduce_mean(_q(critic, b["s"], tf.tanh(actor(b["s"]))))

        def pre(b):
            return None if leaky else backup(b)

        @tf.function
        def train_step(b):
            with rec.training_step():
                y = pre(b)
                with rec.tape() as tape:
                    lc = critic_loss(b, y)
                rec.apply(c_opt, rec.gradients(tape, {"critic": lc}, critic.trainable_variables))
                with rec.tape() as tape:
                    la = actor_loss(b)
                rec.apply(a_opt, rec.gradients(tape, {"actor": la}, actor.trainable_variables))
                kit.polyak(t_actor, actor, TAU)
                kit.polyak(t_critic, critic, TAU)
                rec.record_drift()

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            y = pre(b)
            with tf.GradientTape() as tape:
                lc = critic_loss(b, y)
            c_opt.apply_gradients(
                zip(tape.gradient(lc, critic.trainable_variables), critic.trainable_variables)
            )
            with tf.GradientTape() as tape:
                la = actor_loss(b)
            a_opt.apply_gradients(
                zip(tape.gradient(la, actor.trainable_variables), actor.trainable_variables)
            )
            kit.polyak(t_actor, actor, TAU)
            kit.polyak(t_critic, critic, TAU)

        if watched:
            train_step = rec.watch(watched_step, losses={"lc": "critic", "la": "actor"})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            "critic",
                            kit.taped(lambda y: critic_loss(b, y), lambda: pre(b)),
                            c_opt,
                            lambda: critic.trainable_variables,
                        ),
                        kit.loss_probe(
                            "actor",
                            kit.taped(lambda _: actor_loss(b)),
                            a_opt,
                            lambda: actor.trainable_variables,
                        ),
                    ],
                    models,
                    [a_opt, c_opt],
                    [
                        kit.pair_probe(pairs[0], t_actor, actor, "target_actor"),
                        kit.pair_probe(pairs[1], t_critic, critic, "target_critic"),
                    ],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- TD3 ---------------------------------------------------------------------

TD3_RULES = (
    "only(critic, [critic1, critic2])",
    "never(actor, critic1/*)",
    "never(actor, critic2/*)",
    "never(*, target_*)",
)
POLICY_DELAY = 2


def _td3(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(4)
        actor, t_actor = kit.mlp("actor", [4, A]), kit.mlp("target_actor", [4, A])
        c1, c2 = kit.mlp("critic1", [4, 1], OBS + A), kit.mlp("critic2", [4, 1], OBS + A)
        t1, t2 = (
            kit.mlp("target_critic1", [4, 1], OBS + A),
            kit.mlp("target_critic2", [4, 1], OBS + A),
        )
        for t, o in ((t_actor, actor), (t1, c1), (t2, c2)):
            kit.copy_weights(t, o)
        a_opt, c_opt = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
        models = {
            "actor": actor,
            "critic1": c1,
            "critic2": c2,
            "target_actor": t_actor,
            "target_critic1": t1,
            "target_critic2": t2,
        }
        pairs = [pair_models(t, o, tau=TAU) for t, o in ((t_actor, actor), (t1, c1), (t2, c2))]
        rec = Recorder(logdir, every_n_steps=1, models=models, pairs=pairs, rules=list(TD3_RULES))

        def critic_vars():
            return c1.trainable_variables + c2.trainable_variables

        def actor_vars():
            return actor.trainable_variables + (c1.trainable_variables if leaky else [])

        def critic_loss(b):
            smooth = tf.clip_by_value(0.2 * b["noise"], -0.5, 0.5)
            a2 = tf.clip_by_value(tf.tanh(t_actor(b["s2"])) + smooth, -1.0, 1.0)
            q2 = tf.minimum(_q(t1, b["s2"], a2), _q(t2, b["s2"], a2))
            y = tf.stop_gradient(b["r"] + GAMMA * (1.0 - b["done"]) * q2)
            return tf.reduce_mean(tf.square(_q(c1, b["s"], b["a_cont"]) - y)) + tf.reduce_mean(
                tf.square(_q(c2, b["s"], b["a_cont"]) - y)
            )

        def actor_loss(b):
            return -tf.reduce_mean(_q(c1, b["s"], tf.tanh(actor(b["s"]))))

        @tf.function
        def update_critic(b):
            with rec.tape() as tape:
                lc = critic_loss(b)
            rec.apply(c_opt, rec.gradients(tape, {"critic": lc}, critic_vars()))

        @tf.function
        def update_actor(b):
            with rec.tape() as tape:
                la = actor_loss(b)
            rec.apply(a_opt, rec.gradients(tape, {"actor": la}, actor_vars()))
            for t, o in ((t_actor, actor), (t1, c1), (t2, c2)):
                kit.polyak(t, o, TAU)

        def watched_step(b, update_actor):  # as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                lc = critic_loss(b)
            variables = critic_vars()
            c_opt.apply_gradients(zip(tape.gradient(lc, variables), variables))
            if update_actor:  # a Python bool: one trace each way
                with tf.GradientTape() as tape:
                    la = actor_loss(b)
                variables = actor_vars()
                a_opt.apply_gradients(zip(tape.gradient(la, variables), variables))
                for t, o in ((t_actor, actor), (t1, c1), (t2, c2)):
                    kit.polyak(t, o, TAU)

        if watched:
            watched_train = rec.watch(watched_step, losses={"lc": "critic", "la": "actor"})

        for step in range(4):
            b = kit.batch(step)
            losses = [
                kit.loss_probe("critic", kit.taped(lambda _: critic_loss(b)), c_opt, critic_vars)
            ]
            if step % POLICY_DELAY == 0:
                losses.append(
                    kit.loss_probe("actor", kit.taped(lambda _: actor_loss(b)), a_opt, actor_vars)
                )
            observer.before(
                step,
                _probe(
                    losses,
                    models,
                    [a_opt, c_opt],
                    [
                        kit.pair_probe(p, t, o, n)
                        for p, (t, o, n) in zip(
                            pairs,
                            (
                                (t_actor, actor, "target_actor"),
                                (t1, c1, "target_critic1"),
                                (t2, c2, "target_critic2"),
                            ),
                        )
                    ],
                ),
            )
            if watched:
                watched_train(b, step % POLICY_DELAY == 0)
            else:
                with rec.training_step():
                    update_critic(b)
                    if step % POLICY_DELAY == 0:
                        update_actor(b)
                    rec.record_drift()
            observer.after(step)
        rec.close()

    return train


# ----- SAC ---------------------------------------------------------------------

SAC_RULES = (
    "never(q, pi/*)",
    "never(pi, q1/*)",
    "never(pi, q2/*)",
    "never(*, target_*)",
    "blocked(q, target_q1/*)",
    "blocked(q, target_q2/*)",
    "blocked(q, pi/*)",
    "blocked(alpha, pi/*)",
    "only(alpha, [alpha])",
)
TARGET_ENTROPY = -float(A)


class Temperature(tf.Module):
    """SAC's entropy temperature: one variable, log alpha (alpha = 0.2 at
    first, not 1: at log alpha = 0 the temperature loss is 0 whatever pi does)."""

    def __init__(self):
        super().__init__(name="alpha")
        with self.name_scope:
            self.log_alpha = tf.Variable(np.log(0.2), dtype=tf.float32, name="log_alpha")


def _sac(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(5)
        pi = kit.mlp("pi", [4, 2 * A])
        q1, q2 = kit.mlp("q1", [4, 1], OBS + A), kit.mlp("q2", [4, 1], OBS + A)
        t1, t2 = kit.mlp("target_q1", [4, 1], OBS + A), kit.mlp("target_q2", [4, 1], OBS + A)
        kit.copy_weights(t1, q1)
        kit.copy_weights(t2, q2)
        temp = Temperature()
        q_opt, pi_opt, alpha_opt = (keras.optimizers.Adam(0.01) for _ in range(3))
        models = {"pi": pi, "q1": q1, "q2": q2, "target_q1": t1, "target_q2": t2, "alpha": temp}
        pairs = [pair_models(t1, q1, tau=TAU), pair_models(t2, q2, tau=TAU)]
        rec = Recorder(logdir, every_n_steps=1, models=models, pairs=pairs, rules=list(SAC_RULES))

        def q_vars():
            return q1.trainable_variables + q2.trainable_variables

        def sample(s, noise):
            mean, log_std = tf.split(pi(s), 2, axis=1)
            log_std = tf.clip_by_value(log_std, -5.0, 2.0)
            u = mean + tf.exp(log_std) * noise
            a = tf.tanh(u)
            logp = tf.reduce_sum(
                -0.5 * tf.square(noise) - log_std - 0.5 * np.log(2 * np.pi), axis=1
            )
            return a, logp - tf.reduce_sum(tf.math.log(1.0 - tf.square(a) + 1e-6), axis=1)

        def q_loss(b):
            alpha = tf.exp(temp.log_alpha)
            a2, logp2 = sample(b["s2"], b["noise"][::-1])
            soft = tf.minimum(_q(t1, b["s2"], a2), _q(t2, b["s2"], a2)) - alpha * logp2
            y = tf.stop_gradient(b["r"] + GAMMA * (1.0 - b["done"]) * soft)
            return tf.reduce_mean(tf.square(_q(q1, b["s"], b["a_cont"]) - y)) + tf.reduce_mean(
                tf.square(_q(q2, b["s"], b["a_cont"]) - y)
            )

        def pi_loss(b):
            a, logp = sample(b["s"], b["noise"])
            q = tf.minimum(_q(q1, b["s"], a), _q(q2, b["s"], a))
            return tf.reduce_mean(tf.exp(temp.log_alpha) * logp - q)

        def alpha_loss(b):
            _, logp = sample(b["s"], b["noise"])
            if not leaky:
                logp = tf.stop_gradient(logp)
            return -tf.reduce_mean(temp.log_alpha * (logp + TARGET_ENTROPY))

        @tf.function
        def train_step(b):
            with rec.training_step():
                with rec.tape() as tape:
                    lq = q_loss(b)
                rec.apply(q_opt, rec.gradients(tape, {"q": lq}, q_vars()))
                with rec.tape() as tape:
                    lp = pi_loss(b)
                rec.apply(pi_opt, rec.gradients(tape, {"pi": lp}, pi.trainable_variables))
                with rec.tape() as tape:
                    la = alpha_loss(b)
                rec.apply(alpha_opt, rec.gradients(tape, {"alpha": la}, [temp.log_alpha]))
                kit.polyak(t1, q1, TAU)
                kit.polyak(t2, q2, TAU)
                rec.record_drift()

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                lq = q_loss(b)
            q_opt.apply_gradients(zip(tape.gradient(lq, q_vars()), q_vars()))
            with tf.GradientTape() as tape:
                lp = pi_loss(b)
            pv = pi.trainable_variables
            pi_opt.apply_gradients(zip(tape.gradient(lp, pv), pv))
            with tf.GradientTape() as tape:
                la = alpha_loss(b)
            alpha_opt.apply_gradients(zip(tape.gradient(la, [temp.log_alpha]), [temp.log_alpha]))
            kit.polyak(t1, q1, TAU)
            kit.polyak(t2, q2, TAU)

        if watched:
            train_step = rec.watch(watched_step, losses={"lq": "q", "lp": "pi", "la": "alpha"})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe("q", kit.taped(lambda _: q_loss(b)), q_opt, q_vars),
                        kit.loss_probe(
                            "pi",
                            kit.taped(lambda _: pi_loss(b)),
                            pi_opt,
                            lambda: pi.trainable_variables,
                        ),
                        kit.loss_probe(
                            "alpha",
                            kit.taped(lambda _: alpha_loss(b)),
                            alpha_opt,
                            lambda: [temp.log_alpha],
                        ),
                    ],
                    models,
                    [q_opt, pi_opt, alpha_opt],
                    [
                        kit.pair_probe(pairs[0], t1, q1, "target_q1"),
                        kit.pair_probe(pairs[1], t2, q2, "target_q2"),
                    ],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- actor-critic with a shared trunk, one summed loss ---------------------------

AC_RULES = ("never(actor, ac/critic_head)", "never(critic, ac/actor_head)")


def _shared_trunk(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(6)
        x = keras.Input((OBS,))
        h = keras.layers.Dense(5, activation="tanh", name="trunk")(x)
        logits = keras.layers.Dense(A, name="actor_head")(h)
        value = keras.layers.Dense(1, name="critic_head")(h)
        ac = keras.Model(x, [logits, value], name="ac")
        opt = keras.optimizers.SGD(0.05)
        rec = Recorder(logdir, every_n_steps=1, models={"ac": ac}, rules=list(AC_RULES))

        def losses(b):
            logits, value = ac(b["s"])
            v = value[:, 0]
            adv = b["r"] - v
            if not leaky:
                adv = tf.stop_gradient(adv)
            logp = tf.gather(tf.nn.log_softmax(logits), b["a"], axis=1, batch_dims=1)
            return {
                "actor": -tf.reduce_mean(logp * adv),
                "critic": tf.reduce_mean(tf.square(b["r"] - v)),
            }

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                named = losses(b)
            rec.apply(opt, rec.gradients(tape, named, ac.trainable_variables))

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                named = losses(b)
                actor, critic = named["actor"], named["critic"]
                loss = actor + critic
            variables = ac.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:  # the summed loss's terms, each a loss of its own
            train_step = rec.watch(watched_step, losses={"loss": ["actor", "critic"]})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            n,
                            kit.taped(lambda _, n=n: losses(b)[n]),
                            opt,
                            lambda: ac.trainable_variables,
                        )
                        for n in ("actor", "critic")
                    ],
                    {"ac": ac},
                    [opt],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- A2C with separate networks and optimizers ------------------------------------

A2C_RULES = ("blocked(actor, critic/*)", "never(critic, actor/*)", "never(actor, critic/*)")


def _a2c(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(7)
        actor, critic = kit.mlp("actor", [4, A]), kit.mlp("critic", [4, 1])
        a_opt, c_opt = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.02)
        models = {"actor": actor, "critic": critic}
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(A2C_RULES))

        def actor_loss(b):
            adv = b["r"] - critic(b["s"])[:, 0]
            if not leaky:
                adv = tf.stop_gradient(adv)
            logp = tf.gather(tf.nn.log_softmax(actor(b["s"])), b["a"], axis=1, batch_dims=1)
            return -tf.reduce_mean(logp * adv)

        def critic_loss(b):
            return tf.reduce_mean(tf.square(b["r"] - critic(b["s"])[:, 0]))

        @tf.function
        def train_step(b):
            with rec.training_step():
                with rec.tape() as tape:
                    la, lc = actor_loss(b), critic_loss(b)
                rec.apply(a_opt, rec.gradients(tape, {"actor": la}, actor.trainable_variables))
                rec.apply(c_opt, rec.gradients(tape, {"critic": lc}, critic.trainable_variables))

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape(persistent=True) as tape:
                la, lc = actor_loss(b), critic_loss(b)
            av, cv = actor.trainable_variables, critic.trainable_variables
            a_opt.apply_gradients(zip(tape.gradient(la, av), av))
            c_opt.apply_gradients(zip(tape.gradient(lc, cv), cv))

        if watched:
            train_step = rec.watch(watched_step, losses={"la": "actor", "lc": "critic"})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            "actor",
                            kit.taped(lambda _: actor_loss(b)),
                            a_opt,
                            lambda: actor.trainable_variables,
                        ),
                        kit.loss_probe(
                            "critic",
                            kit.taped(lambda _: critic_loss(b)),
                            c_opt,
                            lambda: critic.trainable_variables,
                        ),
                    ],
                    models,
                    [a_opt, c_opt],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "ddpg",
        TF_FUNCTION,
        _ddpg(False),
        DDPG_RULES,
        note="DDPG: backup before the critic tape, two tapes, two optimizers, Polyak, one training_step",
    ),
    Shape(
        "ddpg_leaky",
        TF_FUNCTION,
        _ddpg(True),
        DDPG_RULES,
        advice=("stop_gradient",),
        mutant_of="ddpg",
        note="backup computed inside the critic tape without stop_gradient",
    ),
    Shape(
        "td3",
        EAGER,
        _td3(False),
        TD3_RULES,
        note="TD3: twin critics, actor every 2nd step, training_step around two tf.functions",
    ),
    Shape(
        "td3_leaky",
        EAGER,
        _td3(True),
        TD3_RULES,
        advice=("var_list",),
        mutant_of="td3",
        note="the actor's optimizer also given critic1",
    ),
    Shape(
        "sac",
        TF_FUNCTION,
        _sac(False),
        SAC_RULES,
        note="SAC: twin Q, one stop_gradient on the backup, temperature with its own optimizer",
    ),
    Shape(
        "sac_leaky",
        TF_FUNCTION,
        _sac(True),
        SAC_RULES,
        advice=("stop_gradient",),
        mutant_of="sac",
        note="temperature loss without stop_gradient on log pi",
    ),
    Shape(
        "actor_critic",
        TF_FUNCTION,
        _shared_trunk(False),
        AC_RULES,
        note="shared trunk, actor + critic summed, one optimizer",
    ),
    Shape(
        "actor_critic_leaky",
        TF_FUNCTION,
        _shared_trunk(True),
        AC_RULES,
        advice=("stop_gradient",),
        mutant_of="actor_critic",
        note="advantage without stop_gradient",
    ),
    Shape(
        "a2c",
        TF_FUNCTION,
        _a2c(False),
        A2C_RULES,
        note="A2C: separate networks, one persistent tape, two optimizers in one training_step",
    ),
    Shape(
        "a2c_leaky",
        TF_FUNCTION,
        _a2c(True),
        A2C_RULES,
        advice=("stop_gradient",),
        mutant_of="a2c",
        note="advantage without stop_gradient",
    ),
]


# The shapes written as their users write them, under `@rec.watch`
# (tests/e2e/corpus/test_watched_corpus.py; not corpus shapes of their own).
# TD3's twin is one watched tf.function the loop tells whether to update the
# actor and the targets (the explicit shape runs two in an eager block).
_BUILDERS = {"ddpg": _ddpg, "td3": _td3, "sac": _sac, "actor_critic": _shared_trunk, "a2c": _a2c}
WATCHED = [
    watched_twin(
        shape,
        _BUILDERS[shape.mutant_of or shape.name](shape.mutant_of is not None, watched=True),
        style=TF_FUNCTION,
    )
    for shape in SHAPES
]
