"""Actor-critic with a shared trunk, watched: one functional model with a policy
head and a value head, one summed loss, one optimizer; the advantage is behind
tf.stop_gradient so the policy loss does not train the value head. `losses=`
names the sum's two terms, each recorded as a loss of its own.

Run: python actor_critic.py LOGDIR
"""

import sys

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder  # gradscope

OBS, ACTIONS = 4, 3

keras.utils.set_random_seed(5)
inputs = keras.Input((OBS,))
trunk = keras.layers.Dense(16, activation="tanh", name="trunk")(inputs)
model = keras.Model(inputs, [keras.layers.Dense(ACTIONS, name="policy_head")(trunk),
                             keras.layers.Dense(1, name="value_head")(trunk)], name="ac")
optimizer = keras.optimizers.Adam(1e-3)
rec = Recorder(models=[model], rules=["blocked(actor_loss, ac/value_head)", "never(critic_loss, ac/policy_head)"])  # gradscope


@rec.watch(losses={"loss": ["actor_loss", "critic_loss"]})  # gradscope, was: @tf.function
def train_step(states, actions, returns):
    with tf.GradientTape() as tape:
        logits, values = model(states)
        advantage = tf.stop_gradient(returns - values[:, 0])
        log_prob = tf.gather(tf.nn.log_softmax(logits), actions, batch_dims=1)
        actor_loss = -tf.reduce_mean(log_prob * advantage)
        critic_loss = 0.5 * tf.reduce_mean(tf.square(returns - values[:, 0]))
        loss = actor_loss + critic_loss
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss


rng = np.random.default_rng(5)
with tf.summary.create_file_writer(sys.argv[1]).as_default():
    for step in range(30):
        states = rng.normal(size=(32, OBS)).astype("float32")
        actions = rng.integers(0, ACTIONS, 32)
        tf.summary.scalar("loss/total", train_step(states, actions, rng.normal(size=32).astype("float32")), step=step)
