"""`Recorder.watch`: a TF2 step recorded as written, with its own tapes, optimizers and targets."""

from __future__ import annotations

import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.pairs import pair_models
from tb_gradscope.record import GradscopeWarning, Recorder
from tests.support.record_fixtures import read_records

pytestmark = pytest.mark.slow  # every test here trains a model

COPY_EVERY = 6
RECORDING_OPS = {"WriteSummary", "EagerPyFunc", "Timestamp"}


def _net(name, inputs, outputs, activation=None):
    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(8, activation="relu", name="h"),
            keras.layers.Dense(outputs, activation=activation, name="out"),
        ],
        name=name,
    )


def _batches(n, seed=0):
    rng = np.random.default_rng(seed)
    return [
        (
            tf.constant(rng.normal(size=(16, 4)).astype("float32")),
            tf.constant(rng.integers(0, 2, 16)),
            tf.constant(rng.normal(size=16).astype("float32")),
            tf.constant(rng.normal(size=(16, 4)).astype("float32")),
        )
        for _ in range(n)
    ]


def _tables(logdir, skip_flowgraph=False):
    (run,) = read_records(logdir).values()
    return {
        key: {step: getattr(value, "values", value) for step, value in by_step.items()}
        for key, by_step in run.items()
        if not (skip_flowgraph and key[0] == "flowgraph")
    }


# ----- the shapes, each as its user writes it ---------------------------------------------


def _dqn(logdir, how, steps=25):
    """The README's DQN (hard copy every 6, a rule), watched, explicit or not recorded."""
    keras.utils.set_random_seed(0)
    online, target = _net("online", 4, 2), _net("target", 4, 2)
    target.set_weights(online.get_weights())
    opt = keras.optimizers.Adam(1e-2)
    rec = Recorder(
        logdir=logdir,
        every_n_steps=4,
        models={"online": online, "target": target},
        pairs=[pair_models(target, online, every=COPY_EVERY)],
        rules=["never(td, target/*)"],
    )

    def train_step(s, a, r, s2):
        y = r + 0.9 * tf.reduce_max(target(s2), axis=1)
        with tf.GradientTape() as tape:
            td = tf.reduce_mean(tf.square(y - tf.gather(online(s), a, batch_dims=1)))
        grads = tape.gradient(td, online.trainable_variables)
        opt.apply_gradients(zip(grads, online.trainable_variables))
        if opt.iterations % COPY_EVERY == 0:
            for t, o in zip(target.weights, online.weights):
                t.assign(o)
        return td

    def explicit_step(s, a, r, s2):
        y = r + 0.9 * tf.reduce_max(target(s2), axis=1)
        with tf.GradientTape() as tape:
            td = tf.reduce_mean(tf.square(y - tf.gather(online(s), a, batch_dims=1)))
        rec.apply(opt, rec.gradients(tape, {"td": td}, online.trainable_variables))
        if opt.iterations % COPY_EVERY == 0:
            for t, o in zip(target.weights, online.weights):
                t.assign(o)
        rec.record_drift()
        return td

    step = {
        "watched": lambda: rec.watch(train_step),
        "explicit": lambda: rec.function(explicit_step),
        "unwatched": lambda: tf.function(train_step),
    }[how]()
    for b in _batches(steps):
        step(*b)
    rec.close()
    return rec, step, [w.numpy() for w in online.weights + target.weights]


def _ddpg(logdir, how, steps=23):
    """Critic then actor, two tapes, two optimizers, Polyak targets, in one tf.function."""
    keras.utils.set_random_seed(3)
    actor, critic = _net("actor", 4, 2, "tanh"), _net("critic", 6, 1)
    actor_t, critic_t = _net("actor_t", 4, 2, "tanh"), _net("critic_t", 6, 1)
    a_opt, c_opt = keras.optimizers.Adam(1e-2), keras.optimizers.SGD(1e-2)
    rec = Recorder(
        logdir=logdir,
        every_n_steps=5,
        models=[actor, critic, actor_t, critic_t],
        pairs=[pair_models(actor_t, actor, tau=0.1), pair_models(critic_t, critic, tau=0.1)],
    )

    @tf.function
    def train_step(s, a, r, s2):
        y = r + 0.9 * tf.squeeze(critic_t(tf.concat([s2, actor_t(s2)], 1)), 1)
        with tf.GradientTape() as tape:
            critic_loss = tf.reduce_mean(tf.square(y - tf.squeeze(critic(tf.concat([s, a], 1)), 1)))
        c_grads = tape.gradient(critic_loss, critic.trainable_variables)
        c_opt.apply_gradients(zip(c_grads, critic.trainable_variables))
        with tf.GradientTape() as tape:
            actor_loss = -tf.reduce_mean(critic(tf.concat([s, actor(s)], 1)))
        a_grads = tape.gradient(actor_loss, actor.trainable_variables)
        a_opt.apply(a_grads, actor.trainable_variables)
        for t, o in zip(actor_t.weights + critic_t.weights, actor.weights + critic.weights):
            t.assign(0.9 * t + 0.1 * o)
        return critic_loss

    step = rec.watch(train_step) if how == "watched" else train_step
    rng = np.random.default_rng(1)
    for _ in range(steps):
        b = [rng.normal(size=shape).astype("float32") for shape in ((8, 4), (8, 2), (8,), (8, 4))]
        step(*[tf.constant(x) for x in b])
    rec.close()
    return rec, step, [w.numpy() for m in (actor, critic, actor_t, critic_t) for w in m.weights]


def _gan(logdir, how, steps=12):
    """Two tapes opened together, two optimizers: the TF DCGAN tutorial's step."""
    keras.utils.set_random_seed(5)
    generator, discriminator = _net("generator", 3, 4), _net("discriminator", 4, 1)
    g_opt, d_opt = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)
    bce = keras.losses.BinaryCrossentropy(from_logits=True)
    rec = Recorder(logdir=logdir, every_n_steps=4, models=[generator, discriminator])

    def train_step(real, noise):
        with tf.GradientTape() as gen_tape, tf.GradientTape() as disc_tape:
            fake = generator(noise)
            real_out, fake_out = discriminator(real), discriminator(fake)
            gen_loss = bce(tf.ones_like(fake_out), fake_out)
            disc_loss = bce(tf.ones_like(real_out), real_out) + bce(
                tf.zeros_like(fake_out), fake_out
            )
        g_grads = gen_tape.gradient(gen_loss, generator.trainable_variables)
        d_grads = disc_tape.gradient(disc_loss, discriminator.trainable_variables)
        g_opt.apply_gradients(zip(g_grads, generator.trainable_variables))
        d_opt.apply_gradients(zip(d_grads, discriminator.trainable_variables))
        return gen_loss, disc_loss

    step = rec.watch(train_step) if how == "watched" else tf.function(train_step)
    rng = np.random.default_rng(2)
    for _ in range(steps):
        step(
            tf.constant(rng.normal(size=(8, 4)).astype("float32")),
            tf.constant(rng.normal(size=(8, 3)).astype("float32")),
        )
    rec.close()
    return rec, step, [w.numpy() for m in (generator, discriminator) for w in m.weights]


# ----- observation only ------------------------------------------------------------------


@pytest.fixture
def no_arithmetic_rewrites():
    """Grappler's arithmetic optimizer off, for this test only.

    It rewrites the GAN discriminator's summed bias gradient differently when
    that gradient has a second consumer (the recorded stats), 1 ulp apart: the
    explicit `rec.record_gradients` form shows the same. With the rewrite off
    both graphs compute it alike, and training must then be bitwise equal.
    """
    before = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    yield
    tf.config.optimizer.set_experimental_options(
        {"arithmetic_optimization": before.get("arithmetic_optimization", True)}
    )


@pytest.mark.parametrize("shape", [_dqn, _ddpg], ids=["dqn", "ddpg"])
def test_watched_training_is_bitwise_the_unwatched_training(tmp_path, shape):
    _, _, plain = shape(str(tmp_path / "plain"), "unwatched")
    _, _, watched = shape(str(tmp_path / "watched"), "watched")
    for a, b in zip(plain, watched):
        np.testing.assert_array_equal(a, b)
    assert len(_tables(str(tmp_path / "watched"))) >= 3  # it did record


def test_watched_gan_trains_bitwise_as_unwatched(tmp_path, no_arithmetic_rewrites):
    _, _, plain = _gan(str(tmp_path / "plain"), "unwatched")
    _, _, watched = _gan(str(tmp_path / "watched"), "watched")
    for a, b in zip(plain, watched):
        np.testing.assert_array_equal(a, b)
    (run,) = read_records(str(tmp_path / "watched")).values()
    assert sorted(name for kind, name in run if kind == "grad_stats") == ["disc_loss", "gen_loss"]


def test_watched_dqn_records_the_tables_of_the_explicit_form(tmp_path):
    shape_args = {"steps": 25}
    _dqn(str(tmp_path / "explicit"), "explicit", **shape_args)
    _dqn(str(tmp_path / "watched"), "watched", **shape_args)
    explicit = _tables(str(tmp_path / "explicit"), skip_flowgraph=True)
    watched = _tables(str(tmp_path / "watched"), skip_flowgraph=True)
    assert ("grad_stats", "td") in watched
    assert watched.keys() == explicit.keys()
    for key in explicit:
        assert watched[key].keys() == explicit[key].keys(), key
        for step, table in explicit[key].items():
            if isinstance(table, np.ndarray):
                np.testing.assert_allclose(watched[key][step], table, rtol=1e-5, err_msg=str(key))
            else:
                assert watched[key][step] == table, (key, step)


def test_watched_flowgraph_pairs_each_loss_with_its_optimizer(tmp_path):
    rec, _, _ = _ddpg(str(tmp_path), "watched", steps=6)
    graph = rec.flowgraph
    assert graph.state("critic_loss", "critic") == fmt.UPDATES
    assert graph.state("critic_loss", "actor_t") == fmt.BLOCKED
    assert graph.state("actor_loss", "actor") == fmt.UPDATES
    assert graph.state("actor_loss", "critic") == fmt.IGNORED


def test_unrecorded_calls_run_the_step_as_written(tmp_path):
    _, step, _ = _dqn(str(tmp_path), "watched", steps=6)
    variants = step._step._variants  # noqa: SLF001 - what each kind of call runs
    args = _batches(1)[0]
    plain = variants["plain"].get_concrete_function(*args).graph.as_graph_def()
    ops = [n.op for n in plain.node] + [n.op for f in plain.library.function for n in f.node_def]
    assert not set(ops) & RECORDING_OPS
    recorded = variants["recorded"].get_concrete_function(*args).graph.as_graph_def()
    assert "WriteSummary" in [n.op for n in recorded.node]


# ----- loss names, delayed updates, what cannot be watched -------------------------------


def _td3(logdir, how, steps=24, every=5):
    """TD3: twin critics every call; the actor and the Polyak update on odd calls."""
    keras.utils.set_random_seed(7)
    actor, critic1, critic2 = (
        _net("actor", 4, 2, "tanh"),
        _net("critic1", 6, 1),
        _net("critic2", 6, 1),
    )
    targets = [
        _net(f"target_{m.name}", m.input_shape[-1], m.output_shape[-1])
        for m in (actor, critic1, critic2)
    ]
    for t, o in zip(targets, (actor, critic1, critic2)):
        t.set_weights(o.get_weights())
    target_actor, target_c1, target_c2 = targets
    a_opt, c_opt = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)
    a_opt.build(actor.trainable_variables)  # not inside the actor's tf.cond branch
    c_opt.build(critic1.trainable_variables + critic2.trainable_variables)
    tau = 0.005
    rec = Recorder(
        logdir=logdir,
        every_n_steps=every,
        models=[actor, critic1, critic2, *targets],
        pairs=[pair_models(t, o, tau=tau) for t, o in zip(targets, (actor, critic1, critic2))],
    )

    def train_step(s, a, r, s2, it):
        a2 = target_actor(s2)
        q2 = tf.minimum(target_c1(tf.concat([s2, a2], 1)), target_c2(tf.concat([s2, a2], 1)))
        y = r + 0.9 * q2[:, 0]
        critic_vars = critic1.trainable_variables + critic2.trainable_variables
        with tf.GradientTape() as tape:
            sa = tf.concat([s, a], 1)
            critic_loss = tf.reduce_mean(tf.square(y - critic1(sa)[:, 0])) + tf.reduce_mean(
                tf.square(y - critic2(sa)[:, 0])
            )
        c_opt.apply_gradients(zip(tape.gradient(critic_loss, critic_vars), critic_vars))
        if it % 2 == 1:
            with tf.GradientTape() as tape:
                actor_loss = -tf.reduce_mean(critic1(tf.concat([s, actor(s)], 1)))
            grads = tape.gradient(actor_loss, actor.trainable_variables)
            a_opt.apply_gradients(zip(grads, actor.trainable_variables))
            for t, o in zip(targets, (actor, critic1, critic2)):
                for tw, ow in zip(t.weights, o.weights):
                    tw.assign((1 - tau) * tw + tau * ow)
        return critic_loss

    step = rec.watch(train_step) if how == "watched" else tf.function(train_step)
    rng = np.random.default_rng(4)
    for it in range(steps):
        s, a, s2 = (rng.normal(size=(8, n)).astype("float32") for n in (4, 2, 4))
        r = rng.normal(size=8).astype("float32")
        step(s, a, r, s2, tf.constant(it, tf.int64))
    rec.close()
    return rec, step, [w.numpy() for m in (actor, critic1, critic2, *targets) for w in m.weights]


def test_td3_delayed_actor_is_named_from_the_code_and_measured_where_it_updates(tmp_path):
    _, _, plain = _td3(str(tmp_path / "plain"), "unwatched")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec, _, watched = _td3(str(tmp_path / "watched"), "watched")
    for a, b in zip(plain, watched):
        np.testing.assert_array_equal(a, b)
    (run,) = read_records(str(tmp_path / "watched")).values()
    assert sorted(name for kind, name in run if kind == "grad_stats") == [
        "actor_loss",
        "critic_loss",
    ]
    # every=5: calls 5 and 15 are odd (the actor trains), 0, 10, 20 are not: there the
    # actor (under a tf.cond, seen when the step is traced at 0) is recorded late, at its
    # first computation after the recording step (1, 11, 21).
    assert sorted(run[("grad_stats", "critic_loss")]) == [0, 5, 10, 15, 20]
    assert sorted(run[("grad_stats", "actor_loss")]) == [1, 5, 11, 15, 21]
    updates = run[("update_stats", "")]
    assert sorted(updates) == [0, 1, 5, 10, 11, 15, 20, 21]
    for step in (1, 5, 11, 15, 21):
        assert updates[step].row("actor")["update_norm"] > 0, step
    for step in (10, 20):
        assert updates[step].row("actor")["update_norm"] == 0, step
    # tau 0.005 declared: measured 0.005 in the calls that update the targets,
    # and the targets are seen to move between records at the others.
    drifts = [by_step for (kind, _), by_step in run.items() if kind == "drift"]
    assert len(drifts) == 3
    for by_step in drifts:
        for step in (5, 15):
            np.testing.assert_allclose(by_step[step].column("tau"), 0.005, rtol=1e-3)
        for step in (10, 20):
            assert (by_step[step].column("target_moved") > 0).all(), step
    anomalies = [
        e
        for key, by_step in run.items()
        if key[0] == "events"
        for events in by_step.values()
        for e in events
        if e.type == fmt.ANOMALY
    ]
    assert anomalies == []
    assert [str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)] == []
    assert rec.violations == []


def _td3_even(logdir, how, steps=24, every=10):
    """TD3 as a loop from another project writes it: the actor and the Polyak update on
    odd calls (a Python bool: one trace each way), recorded every 10: the actor trains
    at no recording step. `explicit`: the documented explicit form of the same loop (an
    eager `training_step()` block around two tf.functions)."""
    keras.utils.set_random_seed(9)
    actor, critic1, critic2 = (
        _net("actor", 4, 2, "tanh"),
        _net("critic1", 6, 1),
        _net("critic2", 6, 1),
    )
    onlines = (actor, critic1, critic2)
    targets = [_net(f"target_{m.name}", m.input_shape[-1], m.output_shape[-1]) for m in onlines]
    for t, o in zip(targets, onlines):
        t.set_weights(o.get_weights())
    a_opt, c_opt = keras.optimizers.Adam(1e-3), keras.optimizers.Adam(1e-3)
    a_opt.build(actor.trainable_variables)  # not in the second trace
    c_opt.build(critic1.trainable_variables + critic2.trainable_variables)
    tau = 0.005
    rec = Recorder(
        logdir=logdir,
        every_n_steps=every,
        models=[*onlines, *targets],
        pairs=[pair_models(t, o, tau=tau) for t, o in zip(targets, onlines)],
    )
    critic_vars = critic1.trainable_variables + critic2.trainable_variables

    def critic_of(s, a, r, s2):
        a2 = targets[0](s2)
        q2 = tf.minimum(targets[1](tf.concat([s2, a2], 1)), targets[2](tf.concat([s2, a2], 1)))
        y = r + 0.9 * q2[:, 0]
        sa = tf.concat([s, a], 1)
        return tf.reduce_mean(tf.square(y - critic1(sa)[:, 0])) + tf.reduce_mean(
            tf.square(y - critic2(sa)[:, 0])
        )

    def actor_of(s):
        return -tf.reduce_mean(critic1(tf.concat([s, actor(s)], 1)))

    def polyak():
        for t, o in zip(targets, onlines):
            for tw, ow in zip(t.weights, o.weights):
                tw.assign((1 - tau) * tw + tau * ow)

    def train_step(s, a, r, s2, update_actor):
        with tf.GradientTape() as tape:
            critic_loss = critic_of(s, a, r, s2)
        c_opt.apply_gradients(zip(tape.gradient(critic_loss, critic_vars), critic_vars))
        if update_actor:
            with tf.GradientTape() as tape:
                actor_loss = actor_of(s)
            grads = tape.gradient(actor_loss, actor.trainable_variables)
            a_opt.apply_gradients(zip(grads, actor.trainable_variables))
            polyak()

    @tf.function
    def update_critic(s, a, r, s2):
        with rec.tape() as tape:
            critic_loss = critic_of(s, a, r, s2)
        rec.apply(c_opt, rec.gradients(tape, {"critic_loss": critic_loss}, critic_vars))

    @tf.function
    def update_actor_and_targets(s):
        with rec.tape() as tape:
            actor_loss = actor_of(s)
        rec.apply(a_opt, rec.gradients(tape, {"actor_loss": actor_loss}, actor.trainable_variables))
        polyak()

    def explicit_step(s, a, r, s2, update_actor):
        rec.record_drift()  # drift of the step before: read at its start, as a watched call
        with rec.training_step():
            update_critic(s, a, r, s2)
            if update_actor:
                update_actor_and_targets(s)

    step = {
        "watched": lambda: rec.watch(train_step),
        "explicit": lambda: explicit_step,
        "unwatched": lambda: tf.function(train_step),
    }[how]()
    late_calls = _count_late_calls(step) if how == "watched" else []
    rng = np.random.default_rng(4)
    for it in range(steps):
        s, a, s2 = (tf.constant(rng.normal(size=(8, n)).astype("float32")) for n in (4, 2, 4))
        r = tf.constant(rng.normal(size=8).astype("float32"))
        step(s, a, r, s2, it % 2 == 1)
    rec.close()
    return rec, [w.numpy() for m in (*onlines, *targets) for w in m.weights], late_calls


def _count_late_calls(watched):
    """The steps at which `watched` runs its late variant (a list that fills as it runs)."""
    step_function = watched._step  # noqa: SLF001
    late, steps = step_function._variants["late"], []  # noqa: SLF001

    def counted(*args, **kwargs):
        steps.append(int(watched.recorder.step.numpy()))
        return late(*args, **kwargs)

    step_function._variants["late"] = counted  # noqa: SLF001
    return steps


def test_td3_actor_off_the_recording_steps_is_recorded_late_as_the_explicit_form_records_it(
    tmp_path,
):
    _, plain, _ = _td3_even(str(tmp_path / "plain"), "unwatched")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rec, watched, late_calls = _td3_even(str(tmp_path / "watched"), "watched")
    assert late_calls == [11, 21]  # every other unrecorded call ran the plain graph
    for a, b in zip(plain, watched):
        np.testing.assert_array_equal(a, b)  # observation only
    _td3_even(str(tmp_path / "explicit"), "explicit")
    (run,) = read_records(str(tmp_path / "watched")).values()
    (explicit,) = read_records(str(tmp_path / "explicit")).values()
    # every=10: the actor trains on odd calls only, so it is recorded at its first
    # computation at or after each recording step (11, 21), as the explicit form does.
    assert sorted(run[("grad_stats", "critic_loss")]) == [0, 10, 20]
    assert sorted(run[("grad_stats", "actor_loss")]) == [11, 21]
    # ||delta theta|| at the recording steps and the late ones; the explicit form has
    # none at step 0 (its eager block knows no variable before its first step).
    assert sorted(run[("update_stats", "")]) == [0, 10, 11, 20, 21]
    for key in (("grad_stats", "critic_loss"), ("grad_stats", "actor_loss"), ("update_stats", "")):
        first = {0} if key[0] == "update_stats" else set()
        assert set(explicit[key]) == set(run[key]) - first, key
        for step, table in explicit[key].items():
            np.testing.assert_allclose(
                run[key][step].values, table.values, rtol=1e-5, atol=1e-7, err_msg=str(key)
            )
    updates = run[("update_stats", "")]
    for step in (11, 21):  # the actor's ||delta theta|| where it is recorded and moves
        assert updates[step].row("actor")["update_norm"] > 0, step
    for step in (0, 10, 20):
        assert updates[step].row("actor")["update_norm"] == 0, step
    # tau 0.005 declared: the targets move on odd calls only, so a record (at the even
    # recording calls) sees no move in its own step, and the move since the record
    # before: the rate is judged between records (no anomaly below).
    drifts = {name: by_step for (kind, name), by_step in run.items() if kind == "drift"}
    assert len(drifts) == 3
    for name, by_step in drifts.items():
        assert sorted(by_step) == sorted(explicit[("drift", name)]) == [0, 10, 20], name
        for step in (10, 20):
            assert (by_step[step].column("target_moved") > 0).all(), (name, step)
    anomalies = [
        e
        for key, by_step in run.items()
        if key[0] == "events"
        for events in by_step.values()
        for e in events
        if e.type == fmt.ANOMALY
    ]
    assert anomalies == []
    assert [str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)] == []
    assert rec.violations == []


def test_a_loss_no_longer_computed_is_chased_for_one_period_only(tmp_path):
    keras.utils.set_random_seed(0)
    net = _net("net", 4, 1)
    opt = keras.optimizers.SGD(1e-2)
    opt.build(net.trainable_variables)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=5, models=[net])

    def train_step(x, warmup):
        with tf.GradientTape() as tape:
            main_loss = tf.reduce_mean(net(x) ** 2)
        opt.apply_gradients(
            zip(tape.gradient(main_loss, net.trainable_variables), net.trainable_variables)
        )
        if warmup:  # computed at call 1 only
            with tf.GradientTape() as tape:
                warmup_loss = tf.reduce_mean(tf.abs(net(x)))
            grads = tape.gradient(warmup_loss, net.trainable_variables)
            opt.apply_gradients(zip(grads, net.trainable_variables))

    step = rec.watch(train_step)
    late_calls = _count_late_calls(step)
    x = tf.ones([2, 4])
    for it in range(17):
        step(x, it == 1)
    rec.close()
    # due at 5, never computed again: calls 6..9 run late (recording nothing), then plain
    assert late_calls == [6, 7, 8, 9]
    (run,) = read_records(str(tmp_path)).values()
    assert sorted(run[("grad_stats", "main_loss")]) == [0, 5, 10, 15]
    assert ("grad_stats", "warmup_loss") not in run
    assert sorted(run[("update_stats", "")]) == [0, 5, 10, 15]


def test_losses_mapping_renames_and_unnamed_targets_are_numbered(tmp_path):
    keras.utils.set_random_seed(0)
    net = _net("net", 4, 2)
    opt = keras.optimizers.SGD(1e-2)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[net])

    @rec.watch(losses={"loss": "regression"})
    def step(x):
        with tf.GradientTape(persistent=True) as tape:
            out = net(x)
            terms = [tf.reduce_mean(tf.square(out)), tf.reduce_mean(out)]
            loss = terms[0]
        g1 = tape.gradient(loss, net.trainable_variables)
        g2 = tape.gradient(terms[1], net.trainable_variables)  # held by no name of its own
        opt.apply_gradients(zip([a + b for a, b in zip(g1, g2)], net.trainable_variables))

    step(tf.ones([2, 4]))
    rec.close()
    (run,) = read_records(str(tmp_path)).values()
    assert sorted(name for kind, name in run if kind == "grad_stats") == ["loss_1", "regression"]


def test_tf_gradients_calls_are_losses_too(tmp_path):
    keras.utils.set_random_seed(0)
    net = _net("net", 4, 2)
    opt = keras.optimizers.SGD(1e-2)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[net])

    @rec.watch
    def step(x):
        value_loss = tf.reduce_mean(tf.square(net(x)))
        grads = tf.gradients(value_loss, net.trainable_variables)
        opt.apply_gradients(zip(grads, net.trainable_variables))

    step(tf.ones([2, 4]))
    rec.close()
    (run,) = read_records(str(tmp_path)).values()
    assert [name for kind, name in run if kind == "grad_stats"] == ["value_loss"]
    assert tf.gradients is not None and "observed" not in tf.gradients.__name__


def test_eager_watched_step_records_and_trains_as_written(tmp_path):
    def run(logdir, watched):
        keras.utils.set_random_seed(0)
        net = _net("net", 4, 2)
        opt = keras.optimizers.SGD(1e-2)
        rec = Recorder(logdir=logdir, every_n_steps=2, models=[net])

        def step(x):
            with tf.GradientTape() as tape:
                value_loss = tf.reduce_mean(tf.square(net(x)))
            opt.apply_gradients(
                zip(tape.gradient(value_loss, net.trainable_variables), net.trainable_variables)
            )

        stepper = rec.watch(step, eager=True) if watched else step
        for i in range(5):
            stepper(tf.fill([2, 4], float(i)))
        if watched:  # the FlowGraph, from one trace of the step as it records
            assert rec.analyze(stepper, tf.ones([2, 4])).state("value_loss", "net") == fmt.UPDATES
        rec.close()
        return [w.numpy() for w in net.weights]

    plain = run(str(tmp_path / "plain"), False)
    watched = run(str(tmp_path / "watched"), True)
    for a, b in zip(plain, watched):
        np.testing.assert_array_equal(a, b)
    (records,) = read_records(str(tmp_path / "watched")).values()
    assert sorted(records[("grad_stats", "value_loss")]) == [0, 2, 4]


def test_a_step_without_a_tape_says_so_once_and_keeps_training(tmp_path):
    keras.utils.set_random_seed(0)
    net = _net("net", 4, 2)
    opt = keras.optimizers.SGD(1e-2)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[net])

    @rec.watch
    def step(grads):  # gradients from elsewhere
        opt.apply_gradients(zip(grads, net.trainable_variables))

    x = tf.ones([2, 4])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(net(x))
            step(tape.gradient(loss, net.trainable_variables))
    said = [str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)]
    watch_said = [m for m in said if ".watch('step')" in m]
    assert len(watch_said) == 1, said
    assert "gradients from elsewhere" in watch_said[0]
    assert "rec.record_gradients" in watch_said[0]
    assert int(rec.step.numpy()) == 3
    assert int(opt.iterations.numpy()) == 3


# ----- one summed loss, its terms named ---------------------------------------------------


def _actor_critic(logdir, how, eager=False, steps=9):
    """A shared trunk, a policy and a value head, one summed loss, one optimizer."""
    keras.utils.set_random_seed(5)
    x = keras.Input((4,))
    trunk = keras.layers.Dense(8, activation="tanh", name="trunk")(x)
    model = keras.Model(
        x,
        [keras.layers.Dense(3, name="policy")(trunk), keras.layers.Dense(1, name="value")(trunk)],
        name="ac",
    )
    opt = keras.optimizers.Adam(1e-2)
    rec = Recorder(logdir=logdir, every_n_steps=4, models=[model])

    def losses(s, a, r):
        logits, values = model(s)
        advantage = tf.stop_gradient(r - values[:, 0])
        log_prob = tf.gather(tf.nn.log_softmax(logits), a, batch_dims=1)
        return -tf.reduce_mean(log_prob * advantage), tf.reduce_mean(tf.square(r - values[:, 0]))

    def train_step(s, a, r):
        with tf.GradientTape() as tape:
            actor_loss, critic_loss = losses(s, a, r)
            loss = actor_loss + critic_loss
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    def explicit_step(s, a, r):
        with rec.tape() as tape:
            actor_loss, critic_loss = losses(s, a, r)
        terms = {"actor_loss": actor_loss, "critic_loss": critic_loss}
        rec.apply(opt, rec.gradients(tape, terms, model.trainable_variables))

    terms = {"loss": ["actor_loss", "critic_loss"]}
    wrap = (lambda f: f) if eager else tf.function
    step = {
        "watched": lambda: rec.watch(train_step, eager=eager, losses=terms),
        "explicit": lambda: rec.function(explicit_step) if not eager else explicit_step,
        "unwatched": lambda: wrap(train_step),
    }[how]()
    for s, a, r, _ in _batches(steps, seed=5):
        step(s, a, r)
    rec.close()
    return rec, step, [w.numpy() for w in model.weights]


@pytest.mark.parametrize("eager", [False, True], ids=["traced", "eager"])
def test_summed_loss_terms_named_in_losses_are_recorded_as_their_own_losses(tmp_path, eager):
    """`losses={"loss": ["actor_loss", "critic_loss"]}`: the one `tape.gradient`
    of the sum records each term as its own loss, as `rec.gradients` with both
    terms does, and trains bitwise as the unwatched step."""
    _, _, plain = _actor_critic(str(tmp_path / "plain"), "unwatched", eager)
    _, _, watched = _actor_critic(str(tmp_path / "watched"), "watched", eager)
    for a, b in zip(plain, watched):
        np.testing.assert_array_equal(a, b)
    _actor_critic(str(tmp_path / "explicit"), "explicit", eager)
    mine = _tables(str(tmp_path / "watched"), skip_flowgraph=True)
    theirs = _tables(str(tmp_path / "explicit"), skip_flowgraph=True)
    names = sorted(name for kind, name in mine if kind == "grad_stats")
    assert names == ["actor_loss", "critic_loss"]
    for key in theirs:
        if key[0] not in ("grad_stats", "conflict"):
            continue
        assert mine[key].keys() == theirs[key].keys(), key
        for step, table in theirs[key].items():
            np.testing.assert_allclose(
                mine[key][step], table, rtol=1e-5, atol=1e-7, err_msg=str(key)
            )


def test_terms_of_a_tape_made_outside_the_step_say_so_and_record_the_sum(tmp_path):
    keras.utils.set_random_seed(0)
    net = _net("net", 4, 2)
    opt = keras.optimizers.SGD(1e-2)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models=[net])

    @rec.watch(eager=True, losses={"loss": ["first", "second"]})
    def step(tape, loss, first, second):
        opt.apply_gradients(
            zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables)
        )

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with tf.GradientTape() as tape:
                out = net(tf.ones([2, 4]))
                first, second = tf.reduce_mean(out), tf.reduce_mean(tf.square(out))
                loss = first + second
            step(tape, loss, first, second)
    said = [str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)]
    assert len(said) == 1 and "'loss'" in said[0] and "terms" in said[0], said
    rec.close()
    (run,) = read_records(str(tmp_path)).values()
    assert [name for kind, name in run if kind == "grad_stats"] == ["loss"]
