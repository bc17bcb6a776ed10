"""Schedules that do not line up with the recording period (issue 35).

TD3 from another project (eager `training_step()` block around two
tf.functions, the loop counting iterations from 1, the actor and the Polyak
targets every 2nd iteration: on the recorder's ODD steps), recorded every 10
steps: the actor trains at no recorded step and the targets move at none of
the steps just before one. Mutant: the actor's optimizer also given critic1.
PPO with separate policy and value tf.functions, each `rec.apply` outside a
block its own step; mutant: the advantage taken from the value net inside the
policy's tape and the policy optimizer given the whole actor-critic's
variables (the value net learns from the policy loss).
"""

from __future__ import annotations

import dataclasses

import keras
import tensorflow as tf

from tb_gradscope.pairs import pair_models
from tb_gradscope.record import Recorder
from tests.support.corpus import kit
from tests.support.corpus.spec import EAGER, TF_FUNCTION, Shape, StepProbe, watched_twin

GAMMA, TAU, A, OBS = 0.9, 0.05, kit.ACTIONS, kit.OBS

# ----- TD3, delayed updates on odd steps ---------------------------------------

TD3_ODD_RULES = (
    "only(critic, [critic1, critic2])",
    "only(actor, [actor])",
    "never(critic, target_*)",
    "tracks(target_actor, actor, tau=0.05)",
    "tracks(target_critic1, critic1, tau=0.05)",
)
TD3_ODD_STEPS, TD3_ODD_EVERY = 25, 10


def examined_at(computed: dict[str, list[int]], every: int) -> dict[int, list[str]]:
    """The steps each loss is recorded at, by the documented schedule (docs/RECIPES.md,
    "Schedules that do not line up"): a loss first computed at step s is due at the first multiple
    of `every` at or after s, and is recorded at its first computation at or
    after each step it is due; {step: [losses recorded there]}."""
    out: dict[int, list[str]] = {}
    for name, steps in computed.items():
        due = None
        for step in steps:
            if due is None:
                due = -(-step // every) * every
            if step >= due:
                out.setdefault(step, []).append(name)
                due = (step // every + 1) * every
    return out


def _td3_schedule(steps: int, every: int) -> dict[int, list[str]]:
    return examined_at({"critic": list(range(steps)), "actor": list(range(1, steps, 2))}, every)


@dataclasses.dataclass(frozen=True)
class ScheduledShape(Shape):
    """A shape whose losses are recorded at steps off the period (`examined_at`)."""

    late_steps: tuple[int, ...] = ()

    @property
    def recorded_steps(self) -> tuple[int, ...]:
        return tuple(sorted(set(super().recorded_steps) | set(self.late_steps)))


def _q(net, s, a):
    return net(tf.concat([s, a], axis=1))[:, 0]


def td3_odd(leaky: bool, watched: bool = False):
    """The TD3 loop; also run by tests/unit/record/test_record_schedules.py with a no-op observer.
    `watched`: the step as its user writes it, one function under `@rec.watch`."""

    def train(logdir, observer, every_n_steps=TD3_ODD_EVERY, steps=TD3_ODD_STEPS):
        kit.seed(5)
        actor, t_actor = kit.mlp("actor", [4, A]), kit.mlp("target_actor", [4, A])
        c1, c2 = kit.mlp("critic1", [4, 1], OBS + A), kit.mlp("critic2", [4, 1], OBS + A)
        t1, t2 = (
            kit.mlp("target_critic1", [4, 1], OBS + A),
            kit.mlp("target_critic2", [4, 1], OBS + A),
        )
        nets = ((t_actor, actor), (t1, c1), (t2, c2))
        for t, o in nets:
            kit.copy_weights(t, o)
        actor_opt, critic_opt = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
        models = {
            "actor": actor,
            "critic1": c1,
            "critic2": c2,
            "target_actor": t_actor,
            "target_critic1": t1,
            "target_critic2": t2,
        }
        pairs = [pair_models(t, o, tau=TAU) for t, o in nets]
        rec = Recorder(
            logdir,
            every_n_steps=every_n_steps,
            models=models,
            pairs=pairs,
            rules=list(TD3_ODD_RULES),
        )

        def critic_vars():
            return c1.trainable_variables + c2.trainable_variables

        def actor_vars():
            return actor.trainable_variables + (c1.trainable_variables if leaky else [])

        def critic_loss(b):
            a2 = tf.clip_by_value(
                tf.tanh(t_actor(b["s2"])) + tf.clip_by_value(0.2 * b["noise"], -0.5, 0.5), -1, 1
            )
            y = tf.stop_gradient(
                b["r"] + GAMMA * tf.minimum(_q(t1, b["s2"], a2), _q(t2, b["s2"], a2))
            )
            return tf.reduce_mean((_q(c1, b["s"], b["a_cont"]) - y) ** 2) + tf.reduce_mean(
                (_q(c2, b["s"], b["a_cont"]) - y) ** 2
            )

        def actor_loss(b):
            return -tf.reduce_mean(_q(c1, b["s"], tf.tanh(actor(b["s"]))))

        @tf.function
        def update_critic(b):
            with tf.GradientTape() as tape:
                loss = critic_loss(b)
            rec.apply(critic_opt, rec.gradients(tape, {"critic": loss}, critic_vars()))

        @tf.function
        def update_actor_and_targets(b):
            with tf.GradientTape() as tape:
                loss = actor_loss(b)
            rec.apply(actor_opt, rec.gradients(tape, {"actor": loss}, actor_vars()))
            for t, o in nets:
                kit.polyak(t, o, TAU)

        def watched_step(b, delayed):  # as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                lc = critic_loss(b)
            variables = critic_vars()
            critic_opt.apply_gradients(zip(tape.gradient(lc, variables), variables))
            if delayed:  # a Python bool: one trace each way
                with tf.GradientTape() as tape:
                    la = actor_loss(b)
                variables = actor_vars()
                actor_opt.apply_gradients(zip(tape.gradient(la, variables), variables))
                for t, o in nets:
                    kit.polyak(t, o, TAU)

        if watched:
            actor_opt.build(actor_vars())  # not in the actor's trace, a later one
            critic_opt.build(critic_vars())
            train_step = rec.watch(watched_step, losses={"lc": "critic", "la": "actor"})

        recorded = _td3_schedule(steps, every_n_steps)
        for it in range(1, steps + 1):  # the project counts iterations from 1
            b, step = kit.batch(it), it - 1
            delayed = it % 2 == 0
            losses = [
                kit.loss_probe(
                    "critic", kit.taped(lambda _: critic_loss(b)), critic_opt, critic_vars
                ),
                kit.loss_probe("actor", kit.taped(lambda _: actor_loss(b)), actor_opt, actor_vars),
            ]
            losses = [p for p in losses if p.name in recorded.get(step, [])]
            observer.before(
                step,
                StepProbe(
                    losses,
                    kit.variables_of(models),
                    [actor_opt, critic_opt],
                    [
                        kit.pair_probe(p, t, o, n)
                        for p, (t, o), n in zip(
                            pairs, nets, ("target_actor", "target_critic1", "target_critic2")
                        )
                    ],
                ),
            )
            if watched:
                train_step(b, delayed)
            else:
                with rec.training_step():
                    update_critic(b)
                    if delayed:
                        update_actor_and_targets(b)
                    rec.record_drift()
            observer.after(step)
        rec.close()

    return train


# ----- PPO, separate policy and value functions -------------------------------

PPO_RULES = ("never(policy, value/*)", "only(value, [value])")
CLIP = 0.2


def _ppo(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(6)
        policy, value = kit.mlp("policy", [4, A]), kit.mlp("value", [4, 1])
        pi_opt, v_opt = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
        models = {"policy": policy, "value": value}
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(PPO_RULES))

        def policy_vars():
            return policy.trainable_variables + (value.trainable_variables if leaky else [])

        def log_prob(b):
            return tf.reduce_sum(tf.nn.log_softmax(policy(b["s"])) * tf.one_hot(b["a"], A), axis=1)

        def advantage(b):
            return b["r"] + GAMMA * value(b["s2"])[:, 0] - value(b["s"])[:, 0]

        def policy_loss(b, old_logp, adv):
            if adv is None:  # the mutant: the advantage inside the tape, no stop_gradient
                adv = advantage(b)
            ratio = tf.exp(log_prob(b) - old_logp)
            return -tf.reduce_mean(
                tf.minimum(ratio * adv, tf.clip_by_value(ratio, 1 - CLIP, 1 + CLIP) * adv)
            )

        def value_loss(b):
            returns = b["r"] + GAMMA * tf.stop_gradient(value(b["s2"])[:, 0])
            return tf.reduce_mean((returns - value(b["s"])[:, 0]) ** 2)

        @tf.function
        def update_policy(b, old_logp):
            adv = None if leaky else tf.stop_gradient(advantage(b))
            with tf.GradientTape() as tape:
                loss = policy_loss(b, old_logp, adv)
            rec.apply(pi_opt, rec.gradients(tape, {"policy": loss}, policy_vars()))

        @tf.function
        def update_value(b):
            with tf.GradientTape() as tape:
                loss = value_loss(b)
            rec.apply(v_opt, rec.gradients(tape, {"value": loss}, value.trainable_variables))

        def watched_policy(b, old_logp):  # the steps as their user writes them, @rec.watch
            adv = None if leaky else tf.stop_gradient(advantage(b))
            with tf.GradientTape() as tape:
                loss = policy_loss(b, old_logp, adv)
            variables = policy_vars()
            pi_opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        def watched_value(b):
            with tf.GradientTape() as tape:
                loss = value_loss(b)
            variables = value.trainable_variables
            v_opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:  # two watched functions: each call is a step
            update_policy = rec.watch(watched_policy, losses={"loss": "policy"})
            update_value = rec.watch(watched_value, losses={"loss": "value"})

        step = 0
        for it in range(3):
            b = kit.batch(it)
            old_logp = log_prob(b)  # the policy that collected the batch
            pre = (lambda: None) if leaky else (lambda: tf.stop_gradient(advantage(b)))
            observer.before(
                step,
                StepProbe(
                    [
                        kit.loss_probe(
                            "policy",
                            kit.taped(lambda adv: policy_loss(b, old_logp, adv), pre),
                            pi_opt,
                            policy_vars,
                        )
                    ],
                    kit.variables_of(models),
                    [pi_opt, v_opt],
                ),
            )
            update_policy(b, old_logp)
            observer.after(step)
            step += 1
            observer.before(
                step,
                StepProbe(
                    [
                        kit.loss_probe(
                            "value",
                            kit.taped(lambda _: value_loss(b)),
                            v_opt,
                            lambda: value.trainable_variables,
                        )
                    ],
                    kit.variables_of(models),
                    [pi_opt, v_opt],
                ),
            )
            update_value(b)
            observer.after(step)
            step += 1
        rec.close()

    return train


_LATE = tuple(s for s in _td3_schedule(TD3_ODD_STEPS, TD3_ODD_EVERY) if s % TD3_ODD_EVERY)

SHAPES = [
    ScheduledShape(
        "td3_odd_delay",
        EAGER,
        td3_odd(False),
        rules=TD3_ODD_RULES,
        late_steps=_LATE,
        steps=TD3_ODD_STEPS,
        every_n_steps=TD3_ODD_EVERY,
        note="TD3, policy delay 2 on odd steps (loop from 1), every 10: block around two tf.functions",
    ),
    ScheduledShape(
        "td3_odd_delay_leaky",
        EAGER,
        td3_odd(True),
        rules=TD3_ODD_RULES,
        mutant_of="td3_odd_delay",
        late_steps=_LATE,
        steps=TD3_ODD_STEPS,
        every_n_steps=TD3_ODD_EVERY,
        advice=("var_list",),
        note="the actor's optimizer also given critic1",
    ),
    Shape(
        "ppo_split",
        TF_FUNCTION,
        _ppo(False),
        rules=PPO_RULES,
        steps=6,
        note="PPO: separate policy and value tf.functions, each apply its own step",
    ),
    Shape(
        "ppo_split_leaky",
        TF_FUNCTION,
        _ppo(True),
        rules=PPO_RULES,
        mutant_of="ppo_split",
        steps=6,
        note="advantage inside the policy tape, policy optimizer over both nets",
    ),
]


# TD3 and PPO written as their users write them, under `@rec.watch`
# (tests/e2e/corpus/test_watched_corpus.py; not corpus shapes of their own).
WATCHED = [
    watched_twin(shape, td3_odd(shape.mutant_of is not None, watched=True))
    for shape in SHAPES
    if shape.name.startswith("td3_odd_delay")
] + [
    watched_twin(shape, _ppo(shape.mutant_of is not None, watched=True))
    for shape in SHAPES
    if shape.name.startswith("ppo_split")
]
