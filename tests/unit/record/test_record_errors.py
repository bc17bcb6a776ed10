"""Bad input gives one clear error or warning naming the problem and the fix."""

from __future__ import annotations

import glob
import os
import shutil
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.record import GradscopeWarning, Recorder, StartPoint
from tb_gradscope.scopes import ScopeSpec
from tests.support.record_fixtures import batch, only, read_records, two_head_model, two_losses


@pytest.fixture(scope="module")
def model():
    return two_head_model(seed=11)


def _grads(model, loss="a"):
    variables = model.trainable_variables
    with tf.GradientTape() as tape:
        value = two_losses(model, *batch(0))[loss]
    return tape.gradient(value, variables), variables


def test_non_scalar_loss_names_the_loss_and_the_fix(tmp_path, model):
    rec = Recorder(logdir=str(tmp_path), models=[model])
    with rec.tape() as tape:
        td = (model(batch(0)[0])[0] - 1.0) ** 2  # [16, 1]: forgot the mean
    with pytest.raises(
        ValueError, match=r"loss 'td' is not a scalar \(shape \[16, 1\]\); pass tf.reduce_mean"
    ):
        rec.gradients(tape, {"td": td}, model.trainable_variables)
    grads, variables = _grads(model)
    with pytest.raises(ValueError, match=r"loss 'td' is not a scalar"):
        rec.record_gradients({"td": list(zip(grads, variables))}, losses={"td": td})


def test_mismatched_grads_and_vars_name_the_variable(tmp_path, model):
    rec = Recorder(logdir=str(tmp_path), models=[model])
    grads, variables = _grads(model)
    with pytest.raises(
        ValueError, match=r"loss 'a': the gradient for variable 'trunk/kernel' has shape \[8\]"
    ):
        rec.record_gradients({"a": list(zip(grads[1:] + grads[:1], variables))})
    with pytest.raises(ValueError, match=r"not a \(gradient, variable\) pair"):
        rec.apply(keras.optimizers.SGD(0.1), [grads[0]])
    with pytest.raises(ValueError, match=r"takes a dict \{loss_name: ...\}"):
        rec.record_gradients(list(zip(grads, variables)))


def test_unknown_variable_warns_once_and_the_rest_is_recorded(tmp_path, model):
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models={"online": model})
    stray = tf.Variable(tf.ones([3]), name="stray/w")
    grads, variables = _grads(model)
    pairs = list(zip(grads, variables)) + [(tf.ones([3]), stray)]
    with pytest.warns(
        GradscopeWarning, match=r"variable 'stray/w' \(loss 'a'\) is not among the recorded"
    ):
        rec.record_gradients({"a": pairs})
    rec.close()
    table = only(read_records(str(tmp_path)))[(fmt.Kind.GRAD_STATS, "a")][0]
    assert "stray" not in table and table.row("online/trunk")["grad_vars"] == 2


def test_unwritable_logdir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("not a directory")
    with pytest.raises(
        ValueError, match=r"cannot write to logdir .*a_file/run.*pass a directory you can create"
    ):
        Recorder(logdir=str(blocker / "run"))


def test_bad_arguments_to_the_recorder_name_the_fix():
    with pytest.raises(ValueError, match=r"every_n_steps must be an int >= 1, got 0"):
        Recorder(every_n_steps=0)
    with pytest.raises(ValueError, match=r"scopes must be a tb_gradscope.scopes.ScopeSpec"):
        Recorder(scopes={"include": ["online"]})
    with pytest.raises(ValueError, match=r"not a variable"):
        Recorder(variables=[np.ones(3)])


def test_non_persistent_tape_with_two_losses_names_the_fix(tmp_path, model):
    rec = Recorder(logdir=str(tmp_path), models=[model])
    with tf.GradientTape() as tape:
        losses = two_losses(model, *batch(0))
    with pytest.raises(ValueError, match=r"persistent tape.*rec.tape\(\)"):
        rec.gradients(tape, losses, model.trainable_variables)


def test_losses_built_outside_the_tape_warn(tmp_path, model):
    rec = Recorder(logdir=str(tmp_path), models=[model])
    with rec.tape() as tape:
        out = model(batch(0)[0])[0]
    late = tf.reduce_mean(out)  # after the block: not recorded
    with pytest.warns(GradscopeWarning, match=r"inside `with rec.tape\(\) as tape:`"):
        rec.gradients(tape, {"late": late}, model.trainable_variables)


def test_bad_input_leaves_an_existing_log_intact(tmp_path, model):
    logdir = str(tmp_path)
    good = Recorder(logdir=logdir, every_n_steps=1, models=[model])
    grads, variables = _grads(model)
    good.record_gradients({"a": list(zip(grads, variables))})
    good.close()
    before = only(read_records(logdir))
    bad = Recorder(logdir=logdir, every_n_steps=1, models=[model])
    with pytest.raises(ValueError):
        bad.record_gradients({"a": list(zip(grads[::-1], variables))})
    with pytest.raises(ValueError):
        bad.gradients(tf.GradientTape(persistent=True), {"a": tf.ones([2])}, variables)
    bad.close()
    after = only(read_records(logdir))
    assert set(after) == set(before)
    np.testing.assert_array_equal(
        after[(fmt.Kind.GRAD_STATS, "a")][0].values, before[(fmt.Kind.GRAD_STATS, "a")][0].values
    )


def test_an_error_inside_recording_steps_aside_and_training_goes_on(tmp_path, model):
    def mapping(name):
        raise KeyError(name)

    rec = Recorder(
        logdir=str(tmp_path), every_n_steps=1, models=[model], scopes=ScopeSpec(mapping=mapping)
    )
    variables = model.trainable_variables
    with rec.tape() as tape:
        losses = two_losses(model, *batch(0))
        total = losses["a"] + losses["b"]
    with pytest.warns(GradscopeWarning, match=r"stopped recording after an error \(KeyError"):
        grads_and_vars = rec.gradients(tape, losses, variables)
    for (g, _), expected in zip(grads_and_vars, tape.gradient(total, variables)):
        np.testing.assert_array_equal(g.numpy(), expected.numpy())
    opt = keras.optimizers.SGD(0.0)
    rec.apply(opt, grads_and_vars)  # still applies, still counts steps
    assert int(rec.step.numpy()) == 1


def test_deleted_event_file_is_reported_on_flush(tmp_path, model):
    logdir = str(tmp_path / "run")
    rec = Recorder(logdir=logdir, every_n_steps=1, models=[model])
    grads, variables = _grads(model)
    rec.record_gradients({"a": list(zip(grads, variables))})
    rec.flush()
    assert glob.glob(os.path.join(logdir, "*tfevents*"))
    shutil.rmtree(logdir)
    with pytest.warns(
        GradscopeWarning, match=r"no event file left in .*records written since are lost"
    ):
        rec.flush()


def _writer_number(scratch) -> int:
    """The number TF gives the next event file of this process (`...<pid>.<n>.v2`)."""
    before = set(glob.glob(os.path.join(scratch, "*tfevents*")))
    tf.summary.create_file_writer(str(scratch)).close()
    (path,) = set(glob.glob(os.path.join(scratch, "*tfevents*"))) - before
    return int(path.split(".")[-2]) + 1


def test_reopened_event_file_sorts_after_the_file_it_follows(tmp_path, model):
    # TF numbers event files per process, so a file reopened in the second the
    # last one was opened in, numbered 10 after 9, sorted before it: TensorBoard
    # follows a run's last file by name and would never have read the new one.
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    number = _writer_number(scratch)
    while len(str(number + 1)) == len(str(number)):  # the recorder's file: 9, 99, ...
        number = _writer_number(scratch)
    logdir = str(tmp_path / "run")
    grads, variables = _grads(model)
    time.sleep(1 - time.time() % 1)  # what follows, to the reopening, fits in one second
    rec = Recorder(logdir=logdir, every_n_steps=1, models=[model])
    rec.record_gradients({"a": list(zip(grads, variables))})
    rec.flush()
    (first,) = glob.glob(os.path.join(logdir, "*tfevents*"))
    os.remove(first)
    with pytest.warns(GradscopeWarning, match="no event file left"):
        rec.flush()
    rec.record_gradients({"a": list(zip(grads, variables))})
    rec.close()
    (reopened,) = glob.glob(os.path.join(logdir, "*tfevents*"))
    assert int(reopened.split(".")[-2]) == int(first.split(".")[-2]) + 1  # the crossing
    assert os.path.basename(reopened) > os.path.basename(first)
    assert list(only(read_records(logdir))[(fmt.Kind.GRAD_STATS, "a")]) == [0]  # the second


def test_start_point_that_is_not_a_tensor_names_the_fix(tmp_path, model):
    rec = Recorder(logdir=str(tmp_path), models=[model])
    with pytest.raises(ValueError, match=r"loss 'q' is a list, not a tensor"):
        rec.gradients(rec.tape(), {"q": [1.0]}, model.trainable_variables)
    assert StartPoint(tf.ones([2])).output_gradients is None


@pytest.mark.parametrize(
    "kwargs, named",
    [
        ({"logdir": ""}, "logdir is empty"),
        ({"logdir": 5}, "logdir must be a directory path"),
        (
            {"every_n_steps": 10**30},
            r"every_n_steps is 1000000000000000000000000000000, more than 2\*\*62",
        ),
        ({"name": ""}, "name must be a Python identifier"),
        ({"name": "a/b"}, "name must be a Python identifier"),
        ({"models": {"a": "notamodel"}}, r"models\['a'\] is a str"),
    ],
)
def test_bad_recorder_arguments_are_refused_up_front_by_name(kwargs, named, tmp_path):
    args = {"logdir": str(tmp_path), **kwargs}
    with pytest.raises(ValueError, match=named):
        Recorder(**args)


def test_write_refuses_what_stats_did_not_return(tmp_path):
    with pytest.raises(ValueError, match="Recorder.write takes what rec.stats"):
        Recorder(str(tmp_path)).write("x")


def test_gradients_of_no_variables_is_refused(tmp_path):
    rec = Recorder(str(tmp_path))
    with rec.tape() as tape:
        loss = tf.constant(1.0)
    with pytest.raises(ValueError, match="variables is empty"):
        rec.gradients(tape, {"l": loss}, [])
