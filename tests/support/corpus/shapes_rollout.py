"""An eager actor-critic whose tape spans a Python-environment rollout, given
its FlowGraph by `rec.analyze_losses` (docs/RECIPES.md, A2C / REINFORCE).

- eager_rollout_replayed: a shared trunk with a policy head and a value head,
  one `rec.tape()` around a whole episode of a Python environment (episodes
  of varying length that end on `done`, actions handed over as Python ints:
  the episode cannot be traced), the losses computed at its end by the
  shape's own `episode_losses` of the stacked policy outputs, one optimizer.
  Before the first episode `rec.analyze_losses` traces that same
  `episode_losses` of `model(states)`, from TensorSpecs: no copy of the loss.
- eager_rollout_replayed_leaky: the advantage without stop_gradient, so the
  actor trains the value head through the shared trunk's critic.
- eager_rollout_two_optimizers: the same episode and losses, one tape, an
  optimizer per loss (the actor's over the trunk and policy head, the
  critic's over the trunk and value head) applied in one `training_step()`;
  `rec.analyze_losses` is given both as {loss: ...} mappings.
- eager_rollout_two_optimizers_leaky: the advantage without stop_gradient:
  the actor's gradient reaches the value head (no optimizer of the actor's
  writes it) and, through it, the trunk.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.record import Recorder
from tests.support.corpus import kit
from tests.support.corpus.spec import EAGER, Shape, StepProbe, watched_twin

GAMMA, A, OBS = 0.9, kit.ACTIONS, kit.OBS
RULES = ("never(actor, ac/value_head)", "never(critic, ac/policy_head)")
# The actor's optimizer never writes the value head: its leak is a reach, not an update.
SPLIT_RULES = ("blocked(actor, ac/value_head)",) + RULES


class Walk:
    """A Python environment whose episode (length, observations, rewards) is a
    pure function of the episode number, whatever the actions, so the oracle's
    reruns see the episode the shape trained on."""

    def reset(self, episode: int) -> np.ndarray:
        rng = np.random.default_rng(5000 + episode)
        self.t, self.length = 0, int(rng.integers(3, 7))
        self._obs = rng.normal(size=(self.length + 1, OBS)).astype(np.float32)
        self._rewards = rng.normal(size=self.length).astype(np.float32)
        return self._obs[0]

    def step(self, action: int) -> tuple[np.ndarray, float, bool]:
        assert isinstance(action, int)
        self.t += 1
        return self._obs[self.t], float(self._rewards[self.t - 1]), self.t == self.length


def _replayed(leaky: bool, two_optimizers: bool = False, watched: bool = False):
    def train(logdir, observer):
        kit.seed(33)
        x = keras.Input((OBS,))
        h = keras.layers.Dense(5, activation="tanh", name="trunk")(x)
        ac = keras.Model(
            x,
            [
                keras.layers.Dense(A, name="policy_head")(h),
                keras.layers.Dense(1, name="value_head")(h),
            ],
            name="ac",
        )
        opt = keras.optimizers.SGD(0.05)
        trunk = ac.get_layer("trunk").trainable_variables
        opts = {"actor": keras.optimizers.Adam(0.01), "critic": opt}
        split = {
            "actor": trunk + ac.get_layer("policy_head").trainable_variables,
            "critic": trunk + ac.get_layer("value_head").trainable_variables,
        }
        rules = SPLIT_RULES if two_optimizers else RULES
        rec = Recorder(logdir, every_n_steps=1, models={"ac": ac}, rules=list(rules))
        env = Walk()

        def episode_losses(logits, values, actions, returns):
            values = values[:, 0]
            advantage = returns - values
            if not leaky:
                advantage = tf.stop_gradient(advantage)
            logp = tf.gather(tf.nn.log_softmax(logits), actions, batch_dims=1)
            return {
                "actor": -tf.reduce_mean(logp * advantage),
                "critic": tf.reduce_mean(tf.square(returns - values)),
            }

        def rollout(episode, gumbel):
            """The episode as the loop runs it, inside whatever tape is open."""
            obs, done, t = env.reset(episode), False, 0
            logits, values, actions, rewards = [], [], [], []
            while not done:
                step_logits, value = ac(obs[None])
                action = int(
                    tf.argmax(step_logits[0] + gumbel[t])
                )  # a sample (Gumbel-max), noise drawn outside
                logits.append(step_logits), values.append(value), actions.append(action)
                obs, reward, done = env.step(action)
                rewards.append(reward)
                t += 1
            ret, returns = 0.0, []
            for reward in reversed(rewards):
                ret = reward + GAMMA * ret
                returns.insert(0, ret)
            return episode_losses(
                tf.concat(logits, 0), tf.concat(values, 0), actions, tf.constant(returns)
            )

        def watched_episode(episode, gumbel):  # as its user writes it, @rec.watch(eager=True)
            with tf.GradientTape(persistent=two_optimizers) as tape:
                named = rollout(episode, gumbel)
                actor, critic = named["actor"], named["critic"]
                loss = actor + critic
            if two_optimizers:
                opts["actor"].apply_gradients(
                    zip(tape.gradient(actor, split["actor"]), split["actor"])
                )
                opts["critic"].apply_gradients(
                    zip(tape.gradient(critic, split["critic"]), split["critic"])
                )
            else:
                variables = ac.trainable_variables
                opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:  # one summed loss: its terms, each a loss of its own
            terms = {} if two_optimizers else {"losses": {"loss": ["actor", "critic"]}}
            watched_episode = rec.watch(watched_episode, eager=True, **terms)

        def noise(episode):
            return np.random.default_rng(6000 + episode).gumbel(size=(8, A)).astype(np.float32)

        rec.analyze_losses(
            lambda states, *rest: episode_losses(*ac(states), *rest),
            opts if two_optimizers else opt,
            split if two_optimizers else ac.trainable_variables,
            tf.TensorSpec([None, OBS]),
            tf.TensorSpec([None], tf.int32),
            tf.TensorSpec([None]),
        )
        for step in range(4):
            gumbel = noise(step)

            def forward_of(name, step=step, gumbel=gumbel):
                return lambda _: rollout(step, gumbel)[name]

            if two_optimizers:
                probes = [
                    kit.loss_probe(n, kit.taped(forward_of(n)), opts[n], lambda n=n: split[n])
                    for n in ("actor", "critic")
                ]
            else:
                probes = [
                    kit.loss_probe(n, kit.taped(forward_of(n)), opt, lambda: ac.trainable_variables)
                    for n in ("actor", "critic")
                ]
            used = list(opts.values()) if two_optimizers else [opt]
            observer.before(step, StepProbe(probes, kit.variables_of({"ac": ac}), used))
            if watched:
                watched_episode(step, gumbel)
            elif two_optimizers:
                with rec.training_step():
                    with rec.tape() as tape:
                        named = rollout(step, gumbel)
                    for name in ("actor", "critic"):
                        rec.apply(opts[name], rec.gradients(tape, {name: named[name]}, split[name]))
            else:
                with rec.tape() as tape:
                    named = rollout(step, gumbel)
                rec.apply(opt, rec.gradients(tape, named, ac.trainable_variables))
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "eager_rollout_replayed",
        EAGER,
        _replayed(False),
        RULES,
        note="eager shared-trunk actor-critic, one tape around a Python-environment episode, "
        "its own loss of the stacked outputs traced by rec.analyze_losses",
    ),
    Shape(
        "eager_rollout_replayed_leaky",
        EAGER,
        _replayed(True),
        RULES,
        mutant_of="eager_rollout_replayed",
        advice=("stop_gradient",),
        note="advantage without stop_gradient: the actor trains the value head",
    ),
    Shape(
        "eager_rollout_two_optimizers",
        EAGER,
        _replayed(False, two_optimizers=True),
        SPLIT_RULES,
        note="the replayed rollout with one optimizer per loss (actor's, critic's) in one "
        "training_step(), rec.analyze_losses given {loss: optimizer} and {loss: variables}",
    ),
    Shape(
        "eager_rollout_two_optimizers_leaky",
        EAGER,
        _replayed(True, two_optimizers=True),
        SPLIT_RULES,
        mutant_of="eager_rollout_two_optimizers",
        advice=("stop_gradient",),
        note="advantage without stop_gradient: the actor's gradient reaches the value head "
        "(ignored: its optimizer does not write it) and the trunk through it",
    ),
]


# The shapes written as their users write them, under `@rec.watch(eager=True)`
# (tests/e2e/corpus/test_watched_corpus.py; not corpus shapes of their own):
# the episode's function is watched, its FlowGraph still from
# `rec.analyze_losses`.
WATCHED = [
    watched_twin(
        shape, _replayed(shape.mutant_of is not None, "two_optimizers" in shape.name, watched=True)
    )
    for shape in SHAPES
]
