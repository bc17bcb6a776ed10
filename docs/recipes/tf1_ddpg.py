"""TF1 DDPG: placeholders, variable_scope, Session; target networks built with
trainable=False and moved by soft replacement; one optimizer per loss with
var_list. Run: python tf1_ddpg.py LOGDIR
"""

import sys

import numpy as np
import tensorflow as tf

from tb_gradscope.integrations.tf1 import GraphRecorder, pair_scopes  # gradscope

v1 = tf.compat.v1
OBS, ACT, GAMMA, TAU = 3, 2, 0.99, 0.05


def dense(x, units, name, activation=None, trainable=True):
    with v1.variable_scope(name):
        w = v1.get_variable("w", [int(x.shape[-1]), units], trainable=trainable)
        b = v1.get_variable("b", [units], trainable=trainable, initializer=v1.zeros_initializer())
    y = tf.matmul(x, w) + b
    return activation(y) if activation else y


def actor(s, trainable):
    return dense(dense(s, 16, "l1", tf.nn.relu, trainable), ACT, "a", tf.nn.tanh, trainable)


def critic(s, a, trainable):
    return dense(dense(tf.concat([s, a], 1), 16, "l1", tf.nn.relu, trainable), 1, "q", None, trainable)


graph = tf.Graph()
with graph.as_default():
    v1.set_random_seed(7)
    S = v1.placeholder(tf.float32, [None, OBS], "s")
    A = v1.placeholder(tf.float32, [None, ACT], "a")
    R = v1.placeholder(tf.float32, [None, 1], "r")
    S_ = v1.placeholder(tf.float32, [None, OBS], "s_")
    with v1.variable_scope("Actor"):
        with v1.variable_scope("eval"):
            a = actor(S, trainable=True)
        with v1.variable_scope("target"):
            a_ = actor(S_, trainable=False)
    with v1.variable_scope("Critic"):
        with v1.variable_scope("eval"):
            q = critic(S, A, trainable=True)
        with v1.variable_scope("eval", reuse=True):
            q_pi = critic(S, a, trainable=True)
        with v1.variable_scope("target"):
            q_ = critic(S_, a_, trainable=False)
    params = {k: v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, scope=k)
              for k in ("Actor/eval", "Actor/target", "Critic/eval", "Critic/target")}
    critic_loss = tf.reduce_mean(tf.square(tf.stop_gradient(R + GAMMA * q_) - q))
    actor_loss = -tf.reduce_mean(q_pi)
    critic_train = v1.train.AdamOptimizer(2e-3).minimize(critic_loss, var_list=params["Critic/eval"])
    actor_train = v1.train.AdamOptimizer(1e-3).minimize(actor_loss, var_list=params["Actor/eval"])
    soft_replace = [v1.assign(t, (1 - TAU) * t + TAU * e)
                    for k in ("Actor", "Critic") for t, e in zip(params[f"{k}/target"], params[f"{k}/eval"])]
    gs = GraphRecorder(sys.argv[1], losses={"critic": critic_loss, "actor": actor_loss},  # gradscope
                       train_ops={"critic": critic_train, "actor": actor_train}, every_n_steps=10,
                       pairs=[pair_scopes("Actor/target", "Actor/eval", tau=TAU),
                              pair_scopes("Critic/target", "Critic/eval", tau=TAU)],
                       rules=["never(critic, Actor/*)", "only(actor, [Actor/eval])", "blocked(critic, */target)",
                              "tracks(Critic/target, Critic/eval)", "tracks(Actor/target, Actor/eval)"])

    rng = np.random.default_rng(7)
    with gs.wrap(v1.Session()) as sess:  # gradscope
        sess.run(v1.global_variables_initializer())
        sess.run([v1.assign(t, e) for k in ("Actor", "Critic")
                  for t, e in zip(params[f"{k}/target"], params[f"{k}/eval"])])
        for step in range(30):
            s, s_ = rng.normal(size=(2, 32, OBS))
            feed = {S: s, A: rng.uniform(-1, 1, (32, ACT)), R: rng.normal(size=(32, 1)), S_: s_}
            c_loss, _ = sess.run([critic_loss, critic_train], feed)
            a_loss, _ = sess.run([actor_loss, actor_train], {S: s})
            sess.run(soft_replace)
            if step % 10 == 0:
                print(f"step {step}: critic {c_loss:.4f} actor {a_loss:.4f}")
