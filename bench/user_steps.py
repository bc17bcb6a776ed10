"""What users run, each next to the same training without tb_gradscope and
next to the logger they would write by hand instead (`bench.peers`).

Not a benchmark itself (run_all runs only bench_*.py): `bench_overhead` times
these. Every builder returns (runs, claims): `runs` maps each candidate to a
`run()` that trains a fixed number of steps (a multiple of 10, so every
repetition holds the same share of recorded steps) and waits for the result;
`claims` says what each writing candidate writes (`peers.check` holds it to
that). Candidates of one builder start from the same weights and batches. The
first candidate is the training without tb_gradscope; `OURS` and `HAND` name,
per builder, the tb_gradscope candidate at the default frequency and the hand
logger it is compared with.

- `readme_loop(units)`: the README's custom-loop quickstart (DQN, pair + rule +
  drift, hard copy every 50), as `rec.function` (as written), as `tf.function`,
  as `rec.function` at every_n_steps=1000, and every hand logger of `peers`;
  as written for `@rec.watch` (`rec_watch`); `WATCH_LABELS` builds that one
  next to the `rec.function` form, twice (`rec_function_again`);
- `ddpg(units)`: a two-optimizer DDPG-shaped step in `rec.training_step()`,
  Polyak targets as pairs, the same three ways, and every hand logger;
- `eager_actor_critic(units)`: an eager actor-critic update (two losses, one
  optimizer, the recorder's tape); by hand: the scalar logger under a Python `if`;
- `keras_fit()`: the README's Keras quickstart (`fit` with the callback and a
  rule); by hand: a `train_step` override writing the scalar logger in a `tf.cond`;
- `tf1_session()`: the README's TF1 quickstart (`GraphRecorder`, two train
  ops); by hand: `tf.compat.v1.summary.scalar` ops fetched every 10th step.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import keras
import numpy as np
import tensorflow as tf

from bench import peers
from bench.peers import Claim, HandLogger
from tb_gradscope import Recorder
from tb_gradscope.pairs import pair_models

Run = Callable[[], None]
Built = tuple[dict[str, Run], dict[str, Claim]]
COPY_EVERY = 50  # the README's hard target copy
TAU = 0.005
EVERY = 10  # the recorders' default frequency
RARE = 1000  # the README configuration recording rarely
IDLE = 10**12  # a recorder with nothing due after its first step
PLAINS = ("plain", "plain_again")  # the step without tb_gradscope; twice, for an A/A control
LABELS = (*PLAINS, "tf_function", "rec_function", "rec_function_rare") + peers.HAND_LOGGERS
README_LABELS = (*LABELS, "rec_watch")  # and the README's own step, as `@rec.watch` records it
# `@rec.watch` against the explicit form, timed on their own: the explicit form
# built twice (`rec_function_again`, an A/A control at the same recording cost)
WATCH_LABELS = ("rec_function", "rec_function_again", "rec_watch")
EVERY_OF = {"rec_function_rare": RARE, "rec_function_idle": IDLE}  # else EVERY
OURS = {
    "readme": "rec_function",
    "ddpg": "rec_function",
    "eager": "recorded",
    "keras": "callback",
    "tf1": "graph_recorder",
}
HAND = {
    "readme": "hand_scalar_host",
    "ddpg": "hand_scalar_host",
    "eager": "hand_scalar_host",
    "keras": "hand_train_step",
    "tf1": "hand_v1_summary",
}


def _loop(step: Callable, batch: tuple, steps: int) -> Run:
    def run() -> None:
        out = None
        for _ in range(steps):
            out = step(*batch)
        if out is not None:
            out.numpy()

    return run


def _ours(
    rec: Recorder,
    logdir: str,
    tags: list[str],
    steps: int,
    every: int = EVERY,
) -> Claim:
    """What a Recorder writing to `logdir` claims: its `tags` (under gradscope/)
    at every `every`-th step (drift too: labelled with its gradients' step)."""
    return Claim(
        logdir,
        frozenset(f"gradscope/{t}" for t in tags),
        steps,
        every,
        exact=False,
        close=rec.close,
    )


# ----- the README's custom loop ---------------------------------------------


def _q_net(name: str, units: int) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(units, activation="relu", name="l1"),
            keras.layers.Dense(2, name="l2"),
        ],
        name=name,
    )


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
    return (
        tf.constant(s),
        tf.constant(rng.integers(0, 2, 32)),
        tf.constant(rng.normal(size=32).astype("float32")),
        tf.constant(s2),
    )


def _dqn_step(online, target, optimizer, counter, log: Callable | None) -> Callable:
    """The README step without tb_gradscope; `log(grads, variables)` before the update."""
    variables = online.trainable_variables

    def step(s, a, r, s2):
        with tf.GradientTape() as tape:
            q = tf.gather(online(s), a, batch_dims=1)
            y = r + 0.99 * tf.stop_gradient(tf.reduce_max(target(s2), axis=1))
            loss = tf.reduce_mean(tf.square(y - q))
        grads = tape.gradient(loss, variables)
        if log is not None:
            log(grads, variables)
        optimizer.apply_gradients(zip(grads, variables))
        counter.assign_add(1)
        if counter % COPY_EVERY == 0:
            for t, o in zip(target.weights, online.weights):
                t.assign(o)
        return loss

    return step


def _readme_step(rec: Recorder, online, target, optimizer) -> Callable:
    """The README step as written, recorded by `rec` (a closure: a step with
    its models as default arguments would pay TF's trace-type check of each
    model at every call, which the plain step does not)."""

    def step(s, a, r, s2):
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

    return step


def _watched_step(online, target, optimizer) -> Callable:
    """The README quickstart's step as written for `@rec.watch`: the user's own
    tape, `tape.gradient`, `apply_gradients` and copy (on the optimizer's count)."""

    def step(s, a, r, s2):
        with tf.GradientTape() as tape:
            q = tf.gather(online(s), a, batch_dims=1)
            y = r + 0.99 * tf.stop_gradient(tf.reduce_max(target(s2), axis=1))
            td = tf.reduce_mean(tf.square(y - q))
        grads = tape.gradient(td, online.trainable_variables)
        optimizer.apply_gradients(zip(grads, online.trainable_variables))
        if optimizer.iterations % COPY_EVERY == 0:
            for t, o in zip(target.weights, online.weights):
                t.assign(o)
        return td

    return step


def readme_loop(
    units: int, logdir: str, steps: int, labels: tuple[str, ...] = README_LABELS
) -> Built:
    """The custom-loop quickstart next to the same loop without tb_gradscope and the hand loggers."""
    batch, runs, claims = _dqn_batch(), {}, {}
    for label in labels:
        online, target, optimizer = _dqn_nets(units)
        where = os.path.join(logdir, f"readme{units}_{label}")
        if label in PLAINS or label in peers.HAND_LOGGERS:
            counter = tf.Variable(0, dtype=tf.int64, trainable=False)

            def make(log, o=online, t=target, opt=optimizer, c=counter):
                return _dqn_step(o, t, opt, c, log)

            if label in PLAINS:
                step = tf.function(make(None))
            else:
                hand = HandLogger(label, where, online.trainable_variables, counter)
                step, claims[label] = hand.train_step(make), hand.claim(steps)
        else:
            every = EVERY_OF.get(label, EVERY)
            rec = Recorder(
                logdir=where,
                every_n_steps=every,
                models={"online": online, "target": target},
                pairs=[pair_models(target, online, every=COPY_EVERY)],
                rules=["never(td, target/*)"],
            )

            if label == "rec_watch":
                step = rec.watch(_watched_step(online, target, optimizer))
            else:
                step = _readme_step(rec, online, target, optimizer)
                step = tf.function(step) if label == "tf_function" else rec.function(step)
            drift = ["drift/target<-online"] if every == EVERY else []
            claims[label] = _ours(
                rec, where, ["grad_stats/td", "update_stats"] + drift, steps, every
            )
        runs[label] = _loop(step, batch, steps)
    return runs, claims


# ----- DDPG: two optimizers, Polyak targets ---------------------------------


def _mlp(name: str, inputs: int, units: int, outputs: int, activation=None) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(units, activation="relu", name="h1"),
            keras.layers.Dense(units, activation="relu", name="h2"),
            keras.layers.Dense(outputs, activation=activation, name="out"),
        ],
        name=name,
    )


def _ddpg_nets(units: int) -> tuple:
    keras.utils.set_random_seed(1)
    actor, critic = _mlp("actor", 8, units, 2, "tanh"), _mlp("critic", 10, units, 1)
    actor_t, critic_t = (
        _mlp("actor_target", 8, units, 2, "tanh"),
        _mlp("critic_target", 10, units, 1),
    )
    actor_t.set_weights(actor.get_weights())
    critic_t.set_weights(critic.get_weights())
    a_opt, c_opt = keras.optimizers.Adam(1e-4), keras.optimizers.Adam(1e-3)
    a_opt.build(actor.trainable_variables)
    c_opt.build(critic.trainable_variables)
    return actor, critic, actor_t, critic_t, a_opt, c_opt


def ddpg(units: int, logdir: str, steps: int, labels: tuple[str, ...] = LABELS) -> Built:
    """A DDPG update (critic then actor, two Adams, Polyak targets)."""
    rng = np.random.default_rng(1)
    batch = (
        tf.constant(rng.normal(size=(64, 8)).astype("float32")),
        tf.constant(rng.normal(size=(64, 2)).astype("float32")),
        tf.constant(rng.normal(size=64).astype("float32")),
        tf.constant(rng.normal(size=(64, 8)).astype("float32")),
    )
    runs, claims = {}, {}
    for label in labels:
        nets = _ddpg_nets(units)
        actor, critic, actor_t, critic_t = nets[:4]
        where = os.path.join(logdir, f"ddpg_{label}")
        if label in PLAINS:
            step = tf.function(_ddpg_step(nets, None))
        elif label in peers.HAND_LOGGERS:
            counter = tf.Variable(0, dtype=tf.int64, trainable=False)
            hand = HandLogger(
                label, where, critic.trainable_variables + actor.trainable_variables, counter
            )
            step = hand.train_step(
                lambda log, nets=nets, counter=counter: _ddpg_step(nets, None, log, counter)
            )
            claims[label] = hand.claim(steps)
        else:
            every = EVERY_OF.get(label, EVERY)
            rec = Recorder(
                logdir=where,
                every_n_steps=every,
                models={
                    "actor": actor,
                    "critic": critic,
                    "actor_target": actor_t,
                    "critic_target": critic_t,
                },
                pairs=[
                    pair_models(actor_t, actor, tau=TAU),
                    pair_models(critic_t, critic, tau=TAU),
                ],
            )
            step = _ddpg_step(nets, rec)
            step = tf.function(step) if label == "tf_function" else rec.function(step)
            drift = ["drift/actor_target<-actor", "drift/critic_target<-critic"]
            claims[label] = _ours(
                rec,
                where,
                ["grad_stats/critic", "grad_stats/actor", "update_stats"] + drift,
                steps,
                every,
            )
        runs[label] = _loop(step, batch, steps)
    return runs, claims


def _ddpg_step(
    nets: tuple,
    rec: Recorder | None,
    log: Callable | None = None,
    counter: tf.Variable | None = None,
) -> Callable:
    """The DDPG update: recorded by `rec`, or plain; a hand logger's `log(grads,
    variables)` sees both networks' gradients, then `counter` advances."""
    actor, critic, actor_t, critic_t, a_opt, c_opt = nets

    def losses(s, a, r, s2):
        y = r + 0.99 * tf.squeeze(critic_t(tf.concat([s2, actor_t(s2)], 1)), 1)
        return tf.reduce_mean(
            tf.square(tf.stop_gradient(y) - tf.squeeze(critic(tf.concat([s, a], 1)), 1))
        )

    def polyak():
        for t, o in zip(actor_t.weights + critic_t.weights, actor.weights + critic.weights):
            t.assign((1 - TAU) * t + TAU * o)

    if rec is None:
        cv, av = critic.trainable_variables, actor.trainable_variables

        def step(s, a, r, s2):
            with tf.GradientTape() as tape:
                critic_loss = losses(s, a, r, s2)
            cg = tape.gradient(critic_loss, cv)
            c_opt.apply_gradients(zip(cg, cv))
            with tf.GradientTape() as tape:
                actor_loss = -tf.reduce_mean(critic(tf.concat([s, actor(s)], 1)))
            ag = tape.gradient(actor_loss, av)
            a_opt.apply_gradients(zip(ag, av))
            if log is not None:
                log(cg + ag, cv + av)
            if counter is not None:
                counter.assign_add(1)
            polyak()
            return critic_loss

        return step

    def step(s, a, r, s2):
        with rec.training_step():
            with rec.tape() as tape:
                critic_loss = losses(s, a, r, s2)
            rec.apply(
                c_opt, rec.gradients(tape, {"critic": critic_loss}, critic.trainable_variables)
            )
            with rec.tape() as tape:
                actor_loss = -tf.reduce_mean(critic(tf.concat([s, actor(s)], 1)))
            rec.apply(a_opt, rec.gradients(tape, {"actor": actor_loss}, actor.trainable_variables))
            polyak()
            rec.record_drift()
        return critic_loss

    return step


# ----- an eager actor-critic loop -------------------------------------------


def eager_actor_critic(units: int, logdir: str, steps: int) -> Built:
    """An eager update: shared trunk, policy and value heads, two losses, one Adam."""
    rng = np.random.default_rng(2)
    obs = tf.constant(rng.normal(size=(64, 8)).astype("float32"))
    actions = tf.constant(rng.integers(0, 4, 64))
    returns = tf.constant(rng.normal(size=64).astype("float32"))
    runs, claims = {}, {}
    for label in ("plain", "recorded", "hand_scalar_host"):
        keras.utils.set_random_seed(2)
        inputs = keras.Input((8,))
        trunk = keras.layers.Dense(units, activation="relu", name="trunk")(inputs)
        model = keras.Model(
            inputs,
            [
                keras.layers.Dense(4, name="policy")(trunk),
                keras.layers.Dense(1, name="value")(trunk),
            ],
            name="ac",
        )
        opt = keras.optimizers.Adam(1e-3)
        opt.build(model.trainable_variables)
        where = os.path.join(logdir, f"eager_{label}")
        rec = (
            Recorder(logdir=where, every_n_steps=EVERY, models={"ac": model})
            if label == "recorded"
            else None
        )
        writer = tf.summary.create_file_writer(where) if label == "hand_scalar_host" else None
        names = peers.variable_names(model.trainable_variables)
        if rec is not None:
            claims[label] = _ours(
                rec,
                where,
                ["grad_stats/policy", "grad_stats/value", "update_stats", "conflict/policy|value"],
                steps,
            )
        if writer is not None:
            claims[label] = Claim(
                where, peers.summary_tags("scalar", names), steps, close=writer.close
            )

        def update(model=model, opt=opt, rec=rec, writer=writer, names=names, calls=[0]):  # noqa: B006
            tape = rec.tape() if rec is not None else tf.GradientTape()
            with tape:
                logits, value = model(obs)
                advantage = returns - tf.squeeze(value, 1)
                logp = tf.gather(tf.nn.log_softmax(logits), actions, batch_dims=1)
                named = {
                    "policy": -tf.reduce_mean(logp * tf.stop_gradient(advantage)),
                    "value": tf.reduce_mean(tf.square(advantage)),
                }
                if rec is None:
                    total = named["policy"] + named["value"]
            if rec is not None:
                rec.apply(opt, rec.gradients(tape, named, model.trainable_variables))
                return named["value"]
            grads = tape.gradient(total, model.trainable_variables)
            if writer is not None and calls[0] % EVERY == 0:
                with writer.as_default(step=calls[0]):
                    peers.summaries("scalar", grads, model.trainable_variables, names)
            calls[0] += 1
            opt.apply_gradients(zip(grads, model.trainable_variables))
            return named["value"]

        runs[label] = _loop(update, (), steps)
    return runs, claims


# ----- the Keras and TF1 quickstarts ----------------------------------------


class _HandLoggedModel(keras.Model):
    """A Keras user's hand logger: `train_step` overridden as Keras' guide
    writes it, the scalar logger's summaries in a `tf.cond` every `every` steps."""

    def __init__(self, *args, writer=None, every: int = EVERY, **kwargs):
        super().__init__(*args, **kwargs)
        self.writer, self.every = writer, every

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        variables = self.trainable_variables
        grads = tape.gradient(loss, variables)
        step = self.optimizer.iterations

        def log():
            with self.writer.as_default(step=step):
                peers.summaries("scalar", grads, variables, peers.variable_names(variables))

        tf.cond(tf.equal(step % self.every, 0), log, lambda: None)
        self.optimizer.apply(grads, variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
        return self.compute_metrics(x, y, y_pred)


def keras_fit(logdir: str, batches: int, every: int) -> Built:
    """The README's Keras quickstart: one-epoch fits of `batches` batches of 32."""
    from tb_gradscope.integrations.keras import GradscopeCallback

    rng = np.random.default_rng(0)
    x = rng.normal(size=(32 * batches, 4)).astype("float32")
    runs, claims = {}, {}
    for label in ("plain", "callback", "hand_train_step"):
        keras.utils.set_random_seed(0)
        where = os.path.join(logdir, f"keras_{label}")
        inputs = keras.Input((4,))
        body = keras.layers.Dense(8, activation="relu", name="body")(inputs)
        outputs = {
            "q": keras.layers.Dense(1, name="q")(body),
            "aux": keras.layers.Dense(1, name="aux")(body),
        }
        callbacks = []
        if label == "hand_train_step":
            writer = tf.summary.create_file_writer(where)
            model = _HandLoggedModel(inputs, outputs, name="agent", writer=writer, every=every)
            names = peers.variable_names(model.trainable_variables)
            claims[label] = Claim(
                where,
                peers.summary_tags("scalar", names, "cond/"),
                batches,
                every,
                close=writer.close,
            )
        else:
            model = keras.Model(inputs, outputs, name="agent")
        if label == "callback":
            callbacks = [
                GradscopeCallback(where, every_n_batches=every, rules=["never(q, agent/aux)"])
            ]
            claims[label] = Claim(
                where,
                frozenset(
                    {"gradscope/grad_stats/q", "gradscope/grad_stats/aux", "gradscope/update_stats"}
                ),
                batches,
                every,
                exact=False,
            )
        model.compile("adam", loss={"q": "mse", "aux": "mse"}, loss_weights={"q": 1.0, "aux": 0.2})

        def run(model=model, callbacks=callbacks):
            model.fit(
                x,
                {"q": x[:, :1], "aux": x[:, 1:2]},
                epochs=1,
                batch_size=32,
                verbose=0,
                shuffle=False,
                callbacks=callbacks,
            )

        runs[label] = run
    return runs, claims


def tf1_session(logdir: str, steps: int, every: int) -> Built:
    """The README's TF1 quickstart: `steps` pairs of run calls (train1, train2)."""
    from tb_gradscope.integrations.tf1 import GraphRecorder

    v1 = tf.compat.v1
    runs, claims = {}, {}
    for label in ("plain", "graph_recorder", "hand_v1_summary"):
        where = os.path.join(logdir, f"tf1_{label}")
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
            vars1, vars2 = (
                scope("Agent/layer1") + scope("Agent/layer2_1"),
                scope("Agent/layer1") + scope("Agent/layer2_2"),
            )
            opt1, opt2 = v1.train.AdamOptimizer(1e-3), v1.train.AdamOptimizer(1e-3)
            fetch1 = fetch2 = writer = None
            if (
                label == "hand_v1_summary"
            ):  # minimize() is these two calls; the summaries read its gradients
                gv1, gv2 = (
                    opt1.compute_gradients(loss1, var_list=vars1),
                    opt2.compute_gradients(loss2, var_list=vars2),
                )
                train1, train2 = opt1.apply_gradients(gv1), opt2.apply_gradients(gv2)
                fetch1, fetch2, tags = (
                    _v1_summaries("loss1", gv1),
                    _v1_summaries("loss2", gv2),
                    set(),
                )
                writer = v1.summary.FileWriter(where)
                for name, gv in (("loss1", gv1), ("loss2", gv2)):
                    tags |= {f"{name}/grad_norm/{v.op.name}" for _, v in gv} | {
                        f"{name}/grad_norm/global"
                    }
                claims[label] = Claim(where, frozenset(tags), steps, every, close=writer.close)
            else:
                train1, train2 = (
                    opt1.minimize(loss1, var_list=vars1),
                    opt2.minimize(loss2, var_list=vars2),
                )
            sess = v1.Session(graph=graph)
            if label == "graph_recorder":
                gs = GraphRecorder(
                    where,
                    losses={"loss1": loss1, "loss2": loss2},
                    train_ops={"loss1": train1, "loss2": train2},
                    every_n_steps=every,
                )
                sess = gs.wrap(sess)
                claims[label] = Claim(
                    where,
                    frozenset(
                        {
                            "gradscope/grad_stats/loss1",
                            "gradscope/grad_stats/loss2",
                            "gradscope/update_stats",
                        }
                    ),
                    steps,
                    every,
                    exact=False,
                    close=lambda gs=gs, sess=sess: gs.close(sess),
                )
            sess.run(v1.global_variables_initializer())
        rng = np.random.default_rng(0)
        feed = {
            X: rng.normal(size=(32, 10)),
            Y1: rng.normal(size=(32, 1)),
            Y2: rng.normal(size=(32, 1)),
        }

        def run(
            sess=sess,
            feed=feed,
            train1=train1,
            train2=train2,
            fetch1=fetch1,
            fetch2=fetch2,
            writer=writer,
            calls=[0],  # noqa: B006 - the call count, kept across runs
        ):
            for _ in range(steps):
                if writer is not None and calls[0] % every == 0:
                    for train, fetch in ((train1, fetch1), (train2, fetch2)):
                        writer.add_summary(sess.run([train, fetch], feed)[1], calls[0])
                else:
                    sess.run(train1, feed)
                    sess.run(train2, feed)
                calls[0] += 1

        runs[label] = run
    return runs, claims


def _v1_summaries(loss: str, grads_and_vars: list) -> tf.Tensor:
    """The TF1 hand logger of one train op: per-variable gradient L2 + the global norm, merged."""
    norms = [
        tf.compat.v1.summary.scalar(f"{loss}/grad_norm/{v.op.name}", tf.norm(g))
        for g, v in grads_and_vars
    ]
    total = tf.compat.v1.summary.scalar(
        f"{loss}/grad_norm/global", tf.linalg.global_norm([g for g, _ in grads_and_vars])
    )
    return tf.compat.v1.summary.merge(norms + [total])
