"""The hook never kills training (issue 15, item 2).

Faults injected into real training — NaN/Inf gradients, None gradients, a
variable created after the first step, a user scope mapping that raises, an
event file that cannot be written — for the TF2 Recorder, the Keras callback
and the TF1 GraphRecorder. Each time: every step trains, the weights match a
run without the hook (or the loop's own result), at most one warning, and what
could be recorded is readable (NaN/Inf counted in `nonfinite`).
"""

from __future__ import annotations

import math
import shutil
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.core.warn import GradscopeWarning
from tb_gradscope.integrations.keras import GradscopeCallback
from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.record import Recorder
from tb_gradscope.scopes import ScopeSpec

pytestmark = pytest.mark.slow  # each case trains a model

STEPS = 6
BAD_STEP = 3  # the step whose input holds Inf
FAULTS: list[str] = []  # what the module injected, for the summary line


def _net(name="net", seed=0):
    keras.utils.set_random_seed(seed)
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, name="l1"), keras.layers.Dense(1, name="l2")],
        name=name,
    )


def _x(step):
    x = np.full((8, 4), 0.5, np.float32) + step * 0.01
    if step == BAD_STEP:
        x[0, 0] = np.inf
    return x


def _gs_warnings(caught):
    return [str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)]


class _SplitOptimizer:
    """Keras optimizers take no new variable once built: a second one for the late one."""

    def __init__(self, split):
        self.split, self.first, self.second = (
            split,
            keras.optimizers.SGD(0.01),
            keras.optimizers.SGD(0.01),
        )

    def apply_gradients(self, grads_and_vars):
        grads_and_vars = list(grads_and_vars)
        self.first.apply_gradients(grads_and_vars[: self.split])
        if grads_and_vars[self.split :]:
            self.second.apply_gradients(grads_and_vars[self.split :])


def _train_tf2(logdir, model, scopes=None, extra=None):
    """Recorded custom loop; `extra` is a variable created after the first step."""
    rec = Recorder(logdir, every_n_steps=1, models=model, scopes=scopes)
    opt = _SplitOptimizer(len(model.trainable_variables))
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(STEPS):
            variables = model.trainable_variables + (
                [extra] if extra is not None and step > 0 else []
            )
            with rec.tape() as tape:
                loss = tf.reduce_mean(tf.square(model(_x(step))))
                if extra is not None and step > 0:
                    loss += tf.reduce_sum(tf.square(extra))
            rec.apply(opt, rec.gradients(tape, {"mse": loss}, variables))
            losses.append(float(loss))
        rec.close()
    return losses, _gs_warnings(caught)


def test_recorder_nonfinite_gradients_are_recorded_and_training_goes_on(tmp_path):
    FAULTS.append("recorder: Inf input -> NaN/Inf gradients")
    losses, said = _train_tf2(str(tmp_path / "run"), _net())
    assert len(losses) == STEPS and not math.isfinite(losses[BAD_STEP])
    (logs,) = load_logdir(str(tmp_path))
    assert sorted(logs.grads) == list(range(STEPS))
    table = logs.grads[BAD_STEP]["mse"]
    assert table.column("nonfinite").max() > 0, "the Inf step is flagged nonfinite"
    assert logs.grads[0]["mse"].column("nonfinite").max() == 0
    assert said == []


def test_recorder_none_gradients_step_aside(tmp_path):
    """A variable the loss never reaches: its gradient is None; the loop applies the rest."""
    FAULTS.append("recorder: None gradient")
    model, unused = _net(), tf.Variable(tf.ones([2]), name="unused")
    rec = Recorder(
        str(tmp_path / "run"), every_n_steps=1, variables=model.trainable_variables + [unused]
    )
    opt = keras.optimizers.SGD(0.01)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(STEPS):
            with rec.tape() as tape:
                loss = tf.reduce_mean(tf.square(model(_x(0))))
            grads = rec.gradients(tape, {"mse": loss}, model.trainable_variables + [unused])
            assert grads[-1][0] is None
            rec.apply(opt, [(g, v) for g, v in grads if g is not None])
        rec.close()
    (logs,) = load_logdir(str(tmp_path))
    assert sorted(logs.grads) == list(range(STEPS))
    assert len(_gs_warnings(caught)) <= 1
    np.testing.assert_array_equal(unused.numpy(), np.ones(2))


def test_recorder_variable_created_after_first_step(tmp_path):
    FAULTS.append("recorder: variable created after the first step")
    extra = None
    model = _net()
    extra = tf.Variable(tf.ones([2]), name="late")
    losses, said = _train_tf2(str(tmp_path / "run"), model, extra=extra)
    assert len(losses) == STEPS and len(said) <= 1
    assert not np.allclose(extra.numpy(), 1.0), "the late variable trained"
    (logs,) = load_logdir(str(tmp_path))
    assert set(range(STEPS)) <= set(logs.grads) | set(logs.updates)


def test_recorder_scope_mapping_that_raises_warns_once_and_steps_aside(tmp_path):
    FAULTS.append("recorder: scope mapping raises")
    plain = _net()
    opt = keras.optimizers.SGD(0.01)
    for _ in range(STEPS):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(plain(_x(0))))
        opt.apply_gradients(
            zip(tape.gradient(loss, plain.trainable_variables), plain.trainable_variables)
        )

    def mapping(name):
        raise KeyError(f"no scope for {name}")

    model = _net()
    rec = Recorder(
        str(tmp_path / "run"), every_n_steps=1, models=model, scopes=ScopeSpec(mapping=mapping)
    )
    opt = keras.optimizers.SGD(0.01)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(STEPS):
            with rec.tape() as tape:
                loss = tf.reduce_mean(tf.square(model(_x(0))))
            rec.apply(opt, rec.gradients(tape, {"mse": loss}, model.trainable_variables))
        rec.close()
    said = _gs_warnings(caught)
    assert len(said) == 1 and "no scope for" in said[0], said
    for a, b in zip(model.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_recorder_logdir_turned_into_a_file_does_not_stop_training(tmp_path):
    """The event file cannot be reopened at all (its directory is now a file)."""
    FAULTS.append("recorder: logdir replaced by a file")
    from tb_gradscope.record import _writing as writing

    logdir = str(tmp_path / "run")
    model = _net()
    rec = Recorder(logdir, every_n_steps=1, models=model)
    opt = keras.optimizers.SGD(0.01)

    @tf.function
    def step(x):
        with rec.tape() as tape:
            loss = tf.reduce_mean(tf.square(model(x)))
        rec.apply(opt, rec.gradients(tape, {"mse": loss}, model.trainable_variables))
        return loss

    old, writing.FLUSH_SECS = writing.FLUSH_SECS, 0.0
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for i in range(STEPS):
                if i == 2:
                    shutil.rmtree(logdir)
                    open(logdir, "w").close()
                assert math.isfinite(float(step(_x(0))))
            rec.close()
    finally:
        writing.FLUSH_SECS = old
    said = _gs_warnings(caught)
    assert len(said) == 1 and "no event file left" in said[0], said


def test_keras_callback_nonfinite_batch_and_raising_mapping(tmp_path):
    FAULTS.append("keras: Inf batch -> nonfinite; scope mapping raises")
    x = np.concatenate([_x(s) for s in range(STEPS)])
    y = np.zeros((len(x), 1), np.float32)
    model = _net()
    model.compile(keras.optimizers.SGD(0.01), loss="mse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(
            x,
            y,
            batch_size=8,
            shuffle=False,
            verbose=0,
            callbacks=[GradscopeCallback(str(tmp_path / "nan"), every_n_batches=1)],
        )
    assert _gs_warnings(caught) == []
    (logs,) = load_logdir(str(tmp_path / "nan"))
    assert sorted(logs.grads) == list(range(STEPS))
    loss_name = next(iter(logs.grads[BAD_STEP]))
    assert logs.grads[BAD_STEP][loss_name].column("nonfinite").max() > 0

    def mapping(name):
        raise RuntimeError("mapping broke")

    plain = _net(seed=1)
    plain.compile(keras.optimizers.SGD(0.01), loss="mse")
    plain.fit(x[:8], y[:8], batch_size=8, epochs=3, shuffle=False, verbose=0)
    model = _net(seed=1)
    model.compile(keras.optimizers.SGD(0.01), loss="mse")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback = GradscopeCallback(
            str(tmp_path / "map"), every_n_batches=1, scopes=ScopeSpec(mapping=mapping)
        )
        model.fit(
            x[:8], y[:8], batch_size=8, epochs=3, shuffle=False, verbose=0, callbacks=[callback]
        )
    said = _gs_warnings(caught)
    assert len(said) == 1 and "mapping broke" in said[0], said
    for a, b in zip(model.get_weights(), plain.get_weights()):
        np.testing.assert_array_equal(a, b)


def _tf1_graph():
    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        v1.set_random_seed(0)
        x = v1.placeholder(tf.float32, [None, 4], name="x")
        with v1.variable_scope("net"):
            w = v1.get_variable("w", [4, 1], initializer=v1.constant_initializer(0.1))
            unused = v1.get_variable("unused", [2], initializer=v1.ones_initializer())
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w)))
        train = v1.train.GradientDescentOptimizer(0.01).minimize(loss, var_list=[w])
        init = v1.global_variables_initializer()
    return graph, x, w, unused, loss, train, init


def test_tf1_nonfinite_and_none_gradients_and_deleted_logdir(tmp_path):
    FAULTS.append("tf1: Inf feed -> nonfinite; None gradient (unused variable); logdir deleted")
    v1 = tf.compat.v1
    graph, x, w, unused, loss, train, init = _tf1_graph()
    logdir = str(tmp_path / "run")
    with graph.as_default():
        gs = GraphRecorder(
            logdir,
            losses={"mse": loss},
            train_ops={"mse": train},
            every_n_steps=1,
            variables=[w, unused],
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with gs.wrap(v1.Session(graph=graph)) as sess:
                sess.run(init)
                trained = 0
                for step in range(STEPS):
                    sess.run(train, {x: _x(step)})
                    trained += 1
                gs.flush()
                (logs,) = load_logdir(str(tmp_path))
                shutil.rmtree(logdir)
                for _ in range(STEPS):
                    sess.run(train, {x: _x(0)})
                    trained += 1
                unused_after = sess.run(unused)
    assert trained == 2 * STEPS
    assert sorted(logs.grads) == list(range(STEPS))
    assert logs.grads[BAD_STEP]["mse"].column("nonfinite").max() > 0
    np.testing.assert_array_equal(unused_after, np.ones(2))
    said = _gs_warnings(caught) + [str(w.message) for w in caught if "is gone" in str(w.message)]
    assert len(set(said)) <= 1, said


@pytest.fixture(scope="module", autouse=True)
def fault_figures():
    yield
    print(
        f"\nfaults injected: {len(FAULTS)} ({'; '.join(FAULTS)}); training stopped by the hook: 0"
    )
