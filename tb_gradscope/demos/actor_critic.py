"""Demo `actor_critic`: a shared-trunk advantage actor-critic on CartPole.

One network `ac` with a shared trunk `ac/trunk` and two heads, `ac/actor`
(policy logits) and `ac/critic` (state value), trained with one optimizer on
two losses: `actor` = -log pi(a|s) * advantage and `critic` = squared error of
the n-step return. The clean twin takes the advantage under `tf.stop_gradient`,
so the actor loss reaches the critic head only forward (`blocked`). The leaky
twin forgets it: the policy gradient pushes V(s) to inflate the advantage, and
the `actor` cell on `ac/critic` turns to `updates`.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.demos import common, envs, recording
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec

GAMMA = 0.99
ROLLOUT = 16
HIDDEN = 64
CRITIC_WEIGHT = 0.5

RULES = (
    "never(actor, ac/critic)",
    "blocked(actor, ac/critic)",
)


def build_actor_critic(observation_size: int, num_actions: int) -> keras.Model:
    """obs -> trunk -> (actor logits, critic value)."""
    obs = keras.Input((observation_size,), name="obs")
    h = keras.layers.Dense(HIDDEN, activation="tanh", name="trunk")(obs)
    logits = keras.layers.Dense(num_actions, name="actor")(h)
    value = keras.layers.Dense(1, name="critic")(h)
    return keras.Model(obs, [logits, value], name="ac")


def discounted_returns(rewards: np.ndarray, dones: np.ndarray, bootstrap: float) -> np.ndarray:
    """n-step returns of a rollout, cut at episode ends, bootstrapped from V(s_last)."""
    returns = np.zeros_like(rewards)
    running = bootstrap
    for t in range(len(rewards) - 1, -1, -1):
        running = rewards[t] + GAMMA * running * (1.0 - dones[t])
        returns[t] = running
    return returns


def train(spec: RunSpec) -> RunResult:
    """Trains one twin: each step collects a rollout and applies one update."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"actor_critic has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    common.seed_everything(spec.seed)
    return _train(spec)


def _train(spec: RunSpec) -> RunResult:
    env = envs.make_cartpole(spec.seed, spec.env)
    model = build_actor_critic(env.observation_size, env.num_actions)
    optimizer = keras.optimizers.Adam(3e-3)
    variables = model.trainable_variables
    leaky = spec.twin == LEAKY
    rec = recording.recorder(spec, {"ac": model}, RULES)

    @tf.function(reduce_retracing=True)
    def act(s):
        logits, value = model(s[None])
        return tf.nn.softmax(logits[0]), value[0, 0]

    @tf.function(reduce_retracing=True)
    def train_step(s, a, returns):
        with rec.tape() as tape:
            logits, value = model(s)
            advantage = returns - value[:, 0]
            if not leaky:
                advantage = tf.stop_gradient(advantage)
            log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a, logits=logits)
            actor = -tf.reduce_mean(log_prob * advantage)
            critic = CRITIC_WEIGHT * tf.reduce_mean(tf.square(returns - value[:, 0]))
        losses = {"actor": actor, "critic": critic}
        rec.apply(optimizer, rec.gradients(tape, losses, variables))
        return actor, critic

    rng = np.random.default_rng(spec.seed)
    s = env.reset()
    obs = np.zeros((ROLLOUT, env.observation_size), np.float32)
    actions = np.zeros((ROLLOUT,), np.int32)
    rewards = np.zeros((ROLLOUT,), np.float32)
    dones = np.zeros((ROLLOUT,), np.float32)
    episode_return, finished = 0.0, []
    actor = critic = float("nan")
    for step in range(spec.steps):
        for t in range(ROLLOUT):
            probs, _ = act(tf.constant(s))
            probs = probs.numpy().astype(np.float64)
            a = int(rng.choice(len(probs), p=probs / probs.sum()))
            s2, r, terminated, truncated = env.step(a)
            obs[t], actions[t], rewards[t], dones[t] = s, a, r, terminated or truncated
            episode_return += r
            s = s2
            if terminated or truncated:
                finished.append(episode_return)
                episode_return, s = 0.0, env.reset()
        bootstrap = 0.0 if dones[-1] else float(act(tf.constant(s))[1])
        returns = discounted_returns(rewards, dones, bootstrap)
        a_loss, c_loss = train_step(obs, actions, returns)
        actor, critic = float(a_loss), float(c_loss)
        spec.on_step(step + 1)
    rec.close()
    mean_return = float(np.mean(finished[-10:])) if finished else float("nan")
    return RunResult(
        {"actor": actor, "critic": critic},
        f"{env.name}, mean return of last episodes {mean_return:.1f}",
    )


DEMO = Demo(
    name="actor_critic",
    title="shared-trunk actor-critic on CartPole, advantage under stop_gradient",
    leak="advantage without stop_gradient: the actor loss trains the critic head",
    rules=RULES,
    train=train,
    default_steps=200,
)
