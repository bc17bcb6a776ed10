"""What users run, each next to the same training without tb_gradscope.

Not a benchmark itself (run_all runs only bench_*.py): `bench_overhead` times
these. Every builder returns {candidate: run}, where `run()` trains a fixed
number of steps (a multiple of 10, so every repetition holds the same share of
recorded steps) and waits for the result. Candidates of one builder start from
the same weights and batches.

- `readme_loop(units)`: the README's custom-loop quickstart (DQN, pair + rule +
  drift, hard copy every 50), as `rec.function` (as written) and as `tf.function`;
- `ddpg(units)`: a two-optimizer DDPG-shaped step in `rec.training_step()`,
  Polyak targets as pairs, as `tf.function` and as `rec.function`;
- `eager_actor_critic(units)`: an eager actor-critic update (two losses, one
  optimizer, the recorder's tape);
- `keras_fit()`: the README's Keras quickstart (`fit` with the callback and a rule);
- `tf1_session()`: the README's TF1 quickstart (`GraphRecorder`, two train ops).
"""

from __future__ import annotations

import os
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder
from tb_gradscope.pairs import pair_models

Run = Callable[[], None]
COPY_EVERY = 50  # the README's hard target copy
TAU = 0.005


def _loop(step: Callable, batch: tuple, steps: int) -> Run:
    def run() -> None:
        out = None
        for _ in range(steps):
            out = step(*batch)
        if out is not None:
            out.numpy()
    return run


# ----- the README's custom loop ---------------------------------------------


def _q_net(name: str, units: int) -> keras.Model:
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(units, activation="relu", name="l1"),
                             keras.layers.Dense(2, name="l2")], name=name)


def _dqn_nets(units: int):
    keras.utils.set_random_seed(0)
    online, target = _q_net("online", units), _q_net("target", units)
    target.set_weights(online.get_weights())
    optimizer = keras.optimizers.Adam(1e-3)
    optimizer.build(online.trainable_variables)
    return online, target, optimizer


def _dqn_batch() -> tuple:
    rng = np.random.default_rng(0)
    s, s2 = rng.normal(size=(2, 32, 4)).astype("float32")
    return (tf.constant(s), tf.constant(rng.integers(0, 2, 32)), tf.constant(rng.normal(size=32).astype("float32")),
            tf.constant(s2))


def readme_loop(units: int, logdir: str, steps: int) -> dict[str, Run]:
    """The custom-loop quickstart: no tb_gradscope, one-trace `tf.function`, `rec.function` (as written)."""
    batch, runs = _dqn_batch(), {}
    for label in ("plain", "tf_function", "rec_function"):
        online, target, optimizer = _dqn_nets(units)
        if label == "plain":
            counter = tf.Variable(0, dtype=tf.int64, trainable=False)

            @tf.function
            def step(s, a, r, s2, online=online, target=target, optimizer=optimizer, counter=counter):
                with tf.GradientTape() as tape:
                    q = tf.gather(online(s), a, batch_dims=1)
                    y = r + 0.99 * tf.stop_gradient(tf.reduce_max(target(s2), axis=1))
                    loss = tf.reduce_mean(tf.square(y - q))
                optimizer.apply_gradients(zip(tape.gradient(loss, online.trainable_variables),
                                              online.trainable_variables))
                counter.assign_add(1)
                if counter % COPY_EVERY == 0:
                    for t, o in zip(target.weights, online.weights):
                        t.assign(o)
                return loss
        else:
            rec = Recorder(logdir=os.path.join(logdir, f"readme{units}_{label}"), every_n_steps=10,
                           models={"online": online, "target": target},
                           pairs=[pair_models(target, online, every=COPY_EVERY)], rules=["never(td, target/*)"])

            def step(s, a, r, s2, online=online, target=target, optimizer=optimizer, rec=rec):
                with rec.tape() as tape:
                    q = tf.gather(online(s), a, batch_dims=1)
                    y = r + 0.99 * tf.stop_gradient(tf.reduce_max(target(s2), axis=1))
                    losses = {"td": tf.reduce_mean(tf.square(y - q))}
                rec.apply(optimizer, rec.gradients(tape, losses, online.trainable_variables))
                if rec.step % COPY_EVERY == 0:
                    for t, o in zip(target.weights, online.weights):
                        t.assign(o)
                rec.record_drift()
                return losses["td"]

            step = tf.function(step) if label == "tf_function" else rec.function(step)
        runs[label] = _loop(step, batch, steps)
    return runs


# ----- DDPG: two optimizers, Polyak targets ---------------------------------


def _mlp(name: str, inputs: int, units: int, outputs: int, activation=None) -> keras.Model:
    return keras.Sequential([keras.Input((inputs,)), keras.layers.Dense(units, activation="relu", name="h1"),
                             keras.layers.Dense(units, activation="relu", name="h2"),
                             keras.layers.Dense(outputs, activation=activation, name="out")], name=name)


def ddpg(units: int, logdir: str, steps: int) -> dict[str, Run]:
    """A DDPG update (critic then actor, two Adams, Polyak targets)."""
    rng = np.random.default_rng(1)
    batch = (tf.constant(rng.normal(size=(64, 8)).astype("float32")),
             tf.constant(rng.normal(size=(64, 2)).astype("float32")),
             tf.constant(rng.normal(size=64).astype("float32")),
             tf.constant(rng.normal(size=(64, 8)).astype("float32")))
    runs = {}
    for label in ("plain", "tf_function", "rec_function"):
        keras.utils.set_random_seed(1)
        actor, critic = _mlp("actor", 8, units, 2, "tanh"), _mlp("critic", 10, units, 1)
        actor_t, critic_t = _mlp("actor_target", 8, units, 2, "tanh"), _mlp("critic_target", 10, units, 1)
        actor_t.set_weights(actor.get_weights())
        critic_t.set_weights(critic.get_weights())
        a_opt, c_opt = keras.optimizers.Adam(1e-4), keras.optimizers.Adam(1e-3)
        a_opt.build(actor.trainable_variables)
        c_opt.build(critic.trainable_variables)
        nets = (actor, critic, actor_t, critic_t, a_opt, c_opt)
        rec = None
        if label != "plain":
            rec = Recorder(logdir=os.path.join(logdir, f"ddpg_{label}"), every_n_steps=10,
                           models={"actor": actor, "critic": critic, "actor_target": actor_t,
                                   "critic_target": critic_t},
                           pairs=[pair_models(actor_t, actor, tau=TAU), pair_models(critic_t, critic, tau=TAU)])
        step = _ddpg_step(nets, rec)
        step = tf.function(step) if label != "rec_function" else rec.function(step)
        runs[label] = _loop(step, batch, steps)
    return runs


def _ddpg_step(nets: tuple, rec: Recorder | None) -> Callable:
    actor, critic, actor_t, critic_t, a_opt, c_opt = nets

    def losses(s, a, r, s2):
        y = r + 0.99 * tf.squeeze(critic_t(tf.concat([s2, actor_t(s2)], 1)), 1)
        return tf.reduce_mean(tf.square(tf.stop_gradient(y) - tf.squeeze(critic(tf.concat([s, a], 1)), 1)))

    def polyak():
        for t, o in zip(actor_t.weights + critic_t.weights, actor.weights + critic.weights):
            t.assign((1 - TAU) * t + TAU * o)

    if rec is None:
        def step(s, a, r, s2):
            with tf.GradientTape() as tape:
                critic_loss = losses(s, a, r, s2)
            c_opt.apply_gradients(zip(tape.gradient(critic_loss, critic.trainable_variables),
                                      critic.trainable_variables))
            with tf.GradientTape() as tape:
                actor_loss = -tf.reduce_mean(critic(tf.concat([s, actor(s)], 1)))
            a_opt.apply_gradients(zip(tape.gradient(actor_loss, actor.trainable_variables),
                                      actor.trainable_variables))
            polyak()
            return critic_loss
        return step

    def step(s, a, r, s2):
        with rec.training_step():
            with rec.tape() as tape:
                critic_loss = losses(s, a, r, s2)
            rec.apply(c_opt, rec.gradients(tape, {"critic": critic_loss}, critic.trainable_variables))
            with rec.tape() as tape:
                actor_loss = -tf.reduce_mean(critic(tf.concat([s, actor(s)], 1)))
            rec.apply(a_opt, rec.gradients(tape, {"actor": actor_loss}, actor.trainable_variables))
            polyak()
            rec.record_drift()
        return critic_loss
    return step


# ----- an eager actor-critic loop -------------------------------------------


def eager_actor_critic(units: int, logdir: str, steps: int) -> dict[str, Run]:
    """An eager update: shared trunk, policy and value heads, two losses, one Adam."""
    rng = np.random.default_rng(2)
    obs = tf.constant(rng.normal(size=(64, 8)).astype("float32"))
    actions = tf.constant(rng.integers(0, 4, 64))
    returns = tf.constant(rng.normal(size=64).astype("float32"))
    runs = {}
    for label in ("plain", "recorded"):
        keras.utils.set_random_seed(2)
        inputs = keras.Input((8,))
        trunk = keras.layers.Dense(units, activation="relu", name="trunk")(inputs)
        model = keras.Model(inputs, [keras.layers.Dense(4, name="policy")(trunk),
                                     keras.layers.Dense(1, name="value")(trunk)], name="ac")
        opt = keras.optimizers.Adam(1e-3)
        opt.build(model.trainable_variables)
        rec = (Recorder(logdir=os.path.join(logdir, "eager_ac"), every_n_steps=10, models={"ac": model})
               if label == "recorded" else None)

        def update(model=model, opt=opt, rec=rec):
            tape = rec.tape() if rec is not None else tf.GradientTape()
            with tape:
                logits, value = model(obs)
                advantage = returns - tf.squeeze(value, 1)
                logp = tf.gather(tf.nn.log_softmax(logits), actions, batch_dims=1)
                named = {"policy": -tf.reduce_mean(logp * tf.stop_gradient(advantage)),
                         "value": tf.reduce_mean(tf.square(advantage))}
                if rec is None:
                    total = named["policy"] + named["value"]
            if rec is None:
                opt.apply_gradients(zip(tape.gradient(total, model.trainable_variables), model.trainable_variables))
            else:
                rec.apply(opt, rec.gradients(tape, named, model.trainable_variables))
            return named["value"]

        runs[label] = _loop(update, (), steps)
    return runs


# ----- the Keras and TF1 quickstarts ----------------------------------------


def keras_fit(logdir: str, batches: int, every: int) -> dict[str, Run]:
    """The README's Keras quickstart: one-epoch fits of `batches` batches of 32."""
    from tb_gradscope.integrations.keras import GradscopeCallback

    rng = np.random.default_rng(0)
    x = rng.normal(size=(32 * batches, 4)).astype("float32")
    runs = {}
    for label in ("plain", "callback"):
        keras.utils.set_random_seed(0)
        inputs = keras.Input((4,))
        body = keras.layers.Dense(8, activation="relu", name="body")(inputs)
        outputs = {"q": keras.layers.Dense(1, name="q")(body), "aux": keras.layers.Dense(1, name="aux")(body)}
        model = keras.Model(inputs, outputs, name="agent")
        model.compile("adam", loss={"q": "mse", "aux": "mse"}, loss_weights={"q": 1.0, "aux": 0.2})
        callbacks = ([GradscopeCallback(os.path.join(logdir, "keras"), every_n_batches=every,
                                        rules=["never(q, agent/aux)"])] if label == "callback" else [])

        def run(model=model, callbacks=callbacks):
            model.fit(x, {"q": x[:, :1], "aux": x[:, 1:2]}, epochs=1, batch_size=32, verbose=0,
                      shuffle=False, callbacks=callbacks)

        runs[label] = run
    return runs


def tf1_session(logdir: str, steps: int, every: int) -> dict[str, Run]:
    """The README's TF1 quickstart: `steps` pairs of run calls (train1, train2)."""
    from tb_gradscope.integrations.tf1 import GraphRecorder

    v1 = tf.compat.v1
    runs = {}
    for label in ("plain", "graph_recorder"):
        graph = tf.Graph()
        with graph.as_default():
            v1.set_random_seed(0)
            X = v1.placeholder(tf.float32, [None, 10], "X")
            Y1 = v1.placeholder(tf.float32, [None, 1], "Y1")
            Y2 = v1.placeholder(tf.float32, [None, 1], "Y2")
            with v1.variable_scope("Agent"):
                with v1.variable_scope("layer1"):
                    s = tf.matmul(X, v1.get_variable("w1", [10, 8])) + v1.get_variable("b1", [1, 8])
                with v1.variable_scope("layer2_1"):
                    y1 = tf.matmul(s, v1.get_variable("w21", [8, 1]))
                with v1.variable_scope("layer2_2"):
                    y2 = tf.matmul(s, v1.get_variable("w22", [8, 1]))
            def scope(name):
                return v1.get_collection(v1.GraphKeys.GLOBAL_VARIABLES, scope=name)
            loss1 = v1.losses.mean_squared_error(labels=Y1, predictions=y1)
            loss2 = v1.losses.mean_squared_error(labels=Y2, predictions=y2)
            train1 = v1.train.AdamOptimizer(1e-3).minimize(loss1, var_list=scope("Agent/layer1") + scope("Agent/layer2_1"))
            train2 = v1.train.AdamOptimizer(1e-3).minimize(loss2, var_list=scope("Agent/layer1") + scope("Agent/layer2_2"))
            sess = v1.Session(graph=graph)
            if label == "graph_recorder":
                gs = GraphRecorder(os.path.join(logdir, "tf1"), losses={"loss1": loss1, "loss2": loss2},
                                   train_ops={"loss1": train1, "loss2": train2}, every_n_steps=every)
                sess = gs.wrap(sess)
            sess.run(v1.global_variables_initializer())
        rng = np.random.default_rng(0)
        feed = {X: rng.normal(size=(32, 10)), Y1: rng.normal(size=(32, 1)), Y2: rng.normal(size=(32, 1))}

        def run(sess=sess, feed=feed, train1=train1, train2=train2):
            for _ in range(steps):
                sess.run(train1, feed)
                sess.run(train2, feed)

        runs[label] = run
    return runs
