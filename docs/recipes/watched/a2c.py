"""An eager advantage actor-critic (REINFORCE with a learned baseline), watched:
one GradientTape around a whole episode of environment steps, a Python
environment, the losses computed from the episode at its end and summed into
one tape.gradient.

One functional model, a shared trunk with a policy head and a value head, one
optimizer; the advantage is behind `tf.stop_gradient`. `losses=` names the
sum's two terms, each recorded as a loss of its own. Run: python a2c.py LOGDIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder  # gradscope

OBS, ACTIONS, GAMMA = 4, 2, 0.95


class Walk:
    """A small Python environment: noisy observations, a reward for action 1
    when the first observation is positive, episodes of 5 to 9 steps."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.t, self.length = 0, int(self.rng.integers(5, 10))
        self.obs = self.rng.normal(size=OBS).astype("float32")
        return self.obs

    def step(self, action):
        reward = float(action == int(self.obs[0] > 0))
        self.t += 1
        self.obs = self.rng.normal(size=OBS).astype("float32")
        return self.obs, reward, self.t == self.length


def discounted(rewards):
    out, ret = [], 0.0
    for r in reversed(rewards):
        ret = r + GAMMA * ret
        out.insert(0, ret)
    return tf.constant(out, tf.float32)


def a2c_losses(logits, values, actions, returns):
    """The episode's actor and critic losses from its stacked policy outputs."""
    values = values[:, 0]
    advantage = tf.stop_gradient(returns - values)
    logp = tf.gather(tf.nn.log_softmax(logits), actions, batch_dims=1)
    return -tf.reduce_mean(logp * advantage), tf.reduce_mean(tf.square(returns - values))


keras.utils.set_random_seed(7)
x = keras.Input((OBS,))
h = keras.layers.Dense(16, activation="tanh", name="trunk")(x)
model = keras.Model(x, [keras.layers.Dense(ACTIONS, name="policy_head")(h), keras.layers.Dense(1, name="value_head")(h)],
                    name="ac")
optimizer = keras.optimizers.Adam(1e-2)
rec = Recorder(models=[model], rules=["blocked(actor_loss, ac/value_head)", "never(critic_loss, ac/policy_head)"])  # gradscope
env = Walk(7)


@rec.watch(eager=True, losses={"loss": ["actor_loss", "critic_loss"]})  # gradscope
def train_episode():
    obs, done = env.reset(), False
    logits, values, actions, rewards = [], [], [], []
    with tf.GradientTape() as tape:
        while not done:
            step_logits, value = model(obs[None])
            action = int(tf.random.categorical(step_logits, 1)[0, 0])
            logits.append(step_logits), values.append(value), actions.append(action)
            obs, reward, done = env.step(action)
            rewards.append(reward)
        actor_loss, critic_loss = a2c_losses(tf.concat(logits, 0), tf.concat(values, 0), actions, discounted(rewards))
        loss = actor_loss + critic_loss
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return actor_loss


with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for episode in range(30):
        tf.summary.scalar("loss/actor", train_episode(), step=episode)
