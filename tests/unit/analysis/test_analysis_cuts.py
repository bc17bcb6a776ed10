"""Cuts the analysis must see on real loop shapes: the tape boundary, and one
stop_gradient separating several producer scopes."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import Recorder
from tb_gradscope import format as fmt
from tb_gradscope.format.flowgraph import CAUSE_TAPE_BOUNDARY
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.summary import run_summary


def _mlp(name: str, inputs: int, outputs: int = 2) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(4, activation="relu", name="l1"),
            keras.layers.Dense(outputs, name="l2"),
        ],
        name=name,
    )


def _train(rec: Recorder, logdir: str, step, batches: int = 3):
    for x in np.random.default_rng(0).normal(size=(batches, 8, 3)).astype("float32"):
        step(x)
    rec.close()
    return load_logdir(logdir)[0]


@pytest.fixture(scope="module")
def mean_teacher(tmp_path_factory):
    """Mean-Teacher: the teacher runs before the tape opens, then follows the
    student by EMA."""
    logdir = str(tmp_path_factory.mktemp("mean_teacher"))
    keras.utils.set_random_seed(1)
    student, teacher = _mlp("student", 3), _mlp("teacher", 3)
    teacher.set_weights(student.get_weights())
    opt = keras.optimizers.SGD(0.1)
    rec = Recorder(
        logdir,
        every_n_steps=1,
        models={"student": student, "teacher": teacher},
        rules=["blocked(consistency, teacher/*)", "never(consistency, teacher/*)"],
    )

    @tf.function
    def step(x):
        target = teacher(x + 0.1)
        with rec.tape() as tape:
            losses = {"consistency": tf.reduce_mean((student(x) - target) ** 2)}
        rec.apply(opt, rec.gradients(tape, losses, student.trainable_variables))
        for t, s in zip(teacher.weights, student.weights):
            t.assign(0.99 * t + 0.01 * s)

    return _train(rec, logdir, step), rec


def test_network_run_before_the_tape_is_blocked_by_the_tape_boundary(mean_teacher):
    logs, _ = mean_teacher
    cells = run_summary(logs, step=2)["cells"]["consistency"]
    assert cells["student"]["state"] == fmt.UPDATES
    assert cells["teacher"]["state"] == fmt.BLOCKED
    assert cells["teacher/l1"]["state"] == fmt.BLOCKED
    graph = logs.flowgraph_at(2)
    causes = {(e.producer_scope, e.cause) for e in graph.blocked_edges if e.loss == "consistency"}
    assert ("teacher/l2", CAUSE_TAPE_BOUNDARY) in causes
    assert ("teacher/l1", CAUSE_TAPE_BOUNDARY) in causes


def test_a_tape_boundary_cut_points_at_the_line_that_called_the_network(mean_teacher):
    """No op of the tape says where it opened; the network's own call before
    it is the user's line to look at (issue 57, item 12)."""
    import pathlib

    logs, _ = mean_teacher
    graph = logs.flowgraph_at(2)
    sources = {
        e.source
        for e in graph.blocked_edges
        if e.loss == "consistency" and e.cause == CAUSE_TAPE_BOUNDARY
    }
    (source,) = sources
    lines = pathlib.Path(__file__).read_text().splitlines()
    called = next(i + 1 for i, line in enumerate(lines) if "target = teacher(x + 0.1)" in line)
    assert source is not None and source.file.endswith("test_analysis_cuts.py"), source
    assert source.line == called


def test_tape_boundary_breaks_no_rule(mean_teacher):
    logs, rec = mean_teacher
    assert rec.violations == []
    assert run_summary(logs)["violations"] == []


def test_one_stop_gradient_names_every_producer_scope_it_separates(tmp_path):
    """SAC's value loss: one stop_gradient on a backup built from two target
    critics and the policy cuts all three."""
    keras.utils.set_random_seed(2)
    value, pi = _mlp("value", 3, 1), _mlp("pi", 3, 1)
    q1, q2 = _mlp("q1_t", 4, 1), _mlp("q2_t", 4, 1)
    opt = keras.optimizers.SGD(0.1)
    models = {"value": value, "pi": pi, "q1_t": q1, "q2_t": q2}
    rec = Recorder(str(tmp_path), every_n_steps=1, models=models)

    @tf.function
    def step(x):
        with rec.tape() as tape:
            sa = tf.concat([x, pi(x)], 1)
            backup = tf.stop_gradient(tf.minimum(q1(sa), q2(sa)) - 0.1 * pi(x))
            losses = {"value_loss": tf.reduce_mean((value(x) - backup) ** 2)}
        rec.apply(opt, rec.gradients(tape, losses, value.trainable_variables))

    logs = _train(rec, str(tmp_path), step)
    graph = logs.flowgraph_at(0)
    producers = {
        e.producer_scope.split("/")[0] for e in graph.blocked_edges if e.loss == "value_loss"
    }
    assert producers == {"q1_t", "q2_t", "pi"}
    blocked_graph_edges = {
        e.src.split("/")[0] for e in graph.edges if "value_loss" in e.blocked_for
    }
    assert blocked_graph_edges == {"q1_t", "q2_t", "pi"}
    cells = run_summary(logs)["cells"]["value_loss"]
    assert {cells[s]["state"] for s in ("q1_t", "q2_t", "pi")} == {fmt.BLOCKED}
