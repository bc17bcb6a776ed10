"""Shapes that pinned `tb-gradscope doctor`'s false positives and misses.

- ddpg_two_tower (tf.function): a correct DDPG whose critic has a state tower
  and an action tower, concatenated; the actor differentiates through the
  critic, only the actor's optimizer applies it. doctor once advised
  stop_gradient on the critic's value for the actor loss (issue 35): the
  state tower enters the actor loss beside the actor's own output, but it is
  part of the critic the actor must differentiate through.
- eager_rollout_ac[_analyzed] (eager): a shared-trunk actor-critic whose
  GradientTape spans the whole rollout (the policy is called step by step
  while the environment is stepped, through `tf.numpy_function`, so the
  episode function traces as it is written); one summed update per episode.
  `_analyzed` traces that same function once with `rec.analyze` (no copy of
  the loss); the other never traces it (no FlowGraph). Mutants: the
  advantage without stop_gradient, so the actor trains the critic head
  (issue 38).
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


def _probe(losses, models, optimizers, pairs=()):
    return StepProbe(losses, kit.variables_of(models), optimizers, pairs)


# ----- DDPG with a two-tower critic -------------------------------------------------

TWO_TOWER_RULES = ("never(critic, actor/*)", "never(actor, critic/*)", "never(*, target_*)")


def _two_tower_critic(name: str) -> keras.Model:
    s, a = keras.Input((OBS,)), keras.Input((A,))
    hs = keras.layers.Dense(4, activation="tanh", name="state_tower")(s)
    ha = keras.layers.Dense(4, activation="tanh", name="action_tower")(a)
    h = keras.layers.Dense(4, activation="tanh", name="joint")(keras.layers.Concatenate()([hs, ha]))
    return keras.Model([s, a], keras.layers.Dense(1, name="q")(h), name=name)


def _ddpg_two_tower(watched: bool = False):
    def train(logdir, observer):
        kit.seed(31)
        actor, t_actor = kit.mlp("actor", [4, A]), kit.mlp("target_actor", [4, A])
        critic, t_critic = _two_tower_critic("critic"), _two_tower_critic("target_critic")
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
        rec = Recorder(
            logdir, every_n_steps=1, models=models, pairs=pairs, rules=list(TWO_TOWER_RULES)
        )

        def backup(b):
            a2 = tf.tanh(t_actor(b["s2"]))
            return b["r"] + GAMMA * (1.0 - b["done"]) * t_critic([b["s2"], a2])[:, 0]

        def critic_loss(b, y):
            return tf.reduce_mean(tf.square(critic([b["s"], b["a_cont"]])[:, 0] - y))

        def actor_loss(b):
            return -tf.reduce_mean(critic([b["s"], tf.tanh(actor(b["s"]))]))

        @tf.function
        def train_step(b):
            with rec.training_step():
                y = backup(b)
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
            y = backup(b)
            with tf.GradientTape() as tape:
                lc = critic_loss(b, y)
            cv = critic.trainable_variables
            c_opt.apply_gradients(zip(tape.gradient(lc, cv), cv))
            with tf.GradientTape() as tape:
                la = actor_loss(b)
            av = actor.trainable_variables
            a_opt.apply_gradients(zip(tape.gradient(la, av), av))
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
                            kit.taped(lambda y: critic_loss(b, y), lambda: backup(b)),
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


# ----- eager actor-critic, one tape around the whole rollout ----------------------------

ROLLOUT_RULES = ("never(actor, ac/critic_head)", "never(critic, ac/actor_head)")
HORIZON = 4


class Env:
    """A deterministic environment: each episode's observations and rewards are
    a pure function of the episode number (the policy's action does not change
    them, so the oracle's reruns see the same episode)."""

    def reset(self, episode: int) -> np.ndarray:
        rng = np.random.default_rng(3000 + episode)
        self._obs = rng.normal(size=(HORIZON + 1, OBS)).astype(np.float32)
        self._rewards = rng.normal(size=HORIZON).astype(np.float32)
        return self._obs[0]

    def step(self, t) -> tuple[np.ndarray, np.ndarray]:
        t = int(t)
        return self._obs[t + 1], self._rewards[t]


def _rollout_ac(leaky: bool, analyze: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(32)
        x = keras.Input((OBS,))
        h = keras.layers.Dense(5, activation="tanh", name="trunk")(x)
        ac = keras.Model(
            x,
            [
                keras.layers.Dense(A, name="actor_head")(h),
                keras.layers.Dense(1, name="critic_head")(h),
            ],
            name="ac",
        )
        opt = keras.optimizers.SGD(0.05)
        rec = Recorder(logdir, every_n_steps=1, models={"ac": ac}, rules=list(ROLLOUT_RULES))
        env = Env()

        def env_step(t):
            obs, reward = tf.numpy_function(env.step, [t], (tf.float32, tf.float32))
            return tf.ensure_shape(obs, [OBS]), tf.ensure_shape(reward, [])

        def rollout_losses(obs, gumbel):
            logps, values, rewards = [], [], []
            for t in range(HORIZON):
                logits, value = ac(obs[None])
                action = tf.argmax(
                    logits[0] + gumbel[t]
                )  # a sample (Gumbel-max), noise drawn outside
                logps.append(tf.gather(tf.nn.log_softmax(logits[0]), action))
                values.append(value[0, 0])
                obs, reward = env_step(t)
                rewards.append(reward)
            ret, returns = 0.0, []
            for reward in reversed(rewards):
                ret = reward + GAMMA * ret
                returns.insert(0, ret)
            returns, values = tf.stack(returns), tf.stack(values)
            advantage = returns - values
            if not leaky:
                advantage = tf.stop_gradient(advantage)
            return {
                "actor": -tf.reduce_mean(tf.stack(logps) * advantage),
                "critic": tf.reduce_mean(tf.square(returns - values)),
            }

        def train_episode(obs, gumbel):
            with rec.tape() as tape:
                named = rollout_losses(obs, gumbel)
            rec.apply(opt, rec.gradients(tape, named, ac.trainable_variables))

        def watched_episode(obs, gumbel):  # as its user writes it, @rec.watch(eager=True)
            with tf.GradientTape() as tape:
                named = rollout_losses(obs, gumbel)
                actor, critic = named["actor"], named["critic"]
                loss = actor + critic
            variables = ac.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:  # the summed loss's terms, each a loss of its own
            train_episode = rec.watch(
                watched_episode, eager=True, losses={"loss": ["actor", "critic"]}
            )

        def noise(episode):
            rng = np.random.default_rng(4000 + episode)
            return tf.constant(rng.gumbel(size=(HORIZON, A)), tf.float32)

        if analyze:
            rec.analyze(train_episode, tf.constant(env.reset(0)), noise(0))
        for step in range(4):
            gumbel = noise(step)

            def forward_of(name, step=step, gumbel=gumbel):
                return lambda _: rollout_losses(tf.constant(env.reset(step)), gumbel)[name]

            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            n, kit.taped(forward_of(n)), opt, lambda: ac.trainable_variables
                        )
                        for n in ("actor", "critic")
                    ],
                    {"ac": ac},
                    [opt],
                ),
            )
            train_episode(tf.constant(env.reset(step)), gumbel)
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "ddpg_two_tower",
        TF_FUNCTION,
        _ddpg_two_tower(),
        TWO_TOWER_RULES,
        note="DDPG whose critic has a state tower and an action tower; the actor learns through it",
    ),
    Shape(
        "eager_rollout_ac",
        EAGER,
        _rollout_ac(False, False),
        ROLLOUT_RULES,
        has_flowgraph=False,
        note="eager shared-trunk actor-critic, one tape around the rollout, never traced",
    ),
    Shape(
        "eager_rollout_ac_leaky",
        EAGER,
        _rollout_ac(True, False),
        ROLLOUT_RULES,
        has_flowgraph=False,
        mutant_of="eager_rollout_ac",
        note="advantage without stop_gradient: the actor trains the critic head",
    ),
    Shape(
        "eager_rollout_ac_analyzed",
        EAGER,
        _rollout_ac(False, True),
        ROLLOUT_RULES,
        note="the same loop, its own episode function traced once by rec.analyze",
    ),
    Shape(
        "eager_rollout_ac_analyzed_leaky",
        EAGER,
        _rollout_ac(True, True),
        ROLLOUT_RULES,
        mutant_of="eager_rollout_ac_analyzed",
        advice=("stop_gradient",),
        note="advantage without stop_gradient: the actor trains the critic head",
    ),
]


# The shapes written as their users write them, under `@rec.watch`
# (tests/e2e/corpus/test_watched_corpus.py; not corpus shapes of their own).
# The rollouts stay eager (`@rec.watch(eager=True)`); the `_analyzed` ones
# give `rec.analyze` the watched episode function.
_BUILDERS = {
    "ddpg_two_tower": lambda: _ddpg_two_tower(watched=True),
    "eager_rollout_ac": lambda: _rollout_ac(False, False, watched=True),
    "eager_rollout_ac_leaky": lambda: _rollout_ac(True, False, watched=True),
    "eager_rollout_ac_analyzed": lambda: _rollout_ac(False, True, watched=True),
    "eager_rollout_ac_analyzed_leaky": lambda: _rollout_ac(True, True, watched=True),
}
WATCHED = [watched_twin(shape, _BUILDERS[shape.name]()) for shape in SHAPES]
