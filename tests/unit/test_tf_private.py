"""Every name of `tb_gradscope/_tf_private.py`, touched once against the installed TF / Keras / tf_keras.

One test per name (`test_<name>`, held by the last test), so an upgrade that
moves a private symbol fails here by name before any recorder test does.
"""

from __future__ import annotations

import ast
import functools
import glob
import inspect
import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

# tf-keras is in the `test` extra: a missing one fails here, never skips green.
import tf_keras

from tb_gradscope import _tf_private as private
from tb_gradscope.integrations.tf1._session import RecordingSession

# ----- graphs, functions and gradients ---------------------------------------


def _graph_calling_a_function():
    inner = tf.function(lambda x: x * 2.0)
    outer = tf.function(lambda x: inner(x) + 1.0)
    graph = outer.get_concrete_function(tf.TensorSpec([], tf.float32)).graph
    call = next(
        op
        for op in graph.get_operations()
        if op.type in ("PartitionedCall", "StatefulPartitionedCall")
    )
    return graph, call.get_attr("f").name


def test_library_function():
    graph, name = _graph_calling_a_function()
    fn = private.library_function(graph, name)
    assert fn is not None and (getattr(fn, "graph", None) is not None or fn.definition is not None)
    assert private.library_function(graph, "no_such_function") is None
    assert private.library_function(object(), name) is None


def test_function_def_to_graph():
    graph, name = _graph_calling_a_function()
    definition = private.library_function(graph, name).definition
    body = private.function_def_to_graph(definition)
    assert isinstance(body, tf.Graph)
    assert "Mul" in {op.type for op in body.get_operations()}


def test_gradient_function():
    assert callable(private.gradient_function("MatMul"))
    assert private.gradient_function("StopGradient") is None  # tf.no_gradient
    with pytest.raises(LookupError):
        private.gradient_function("NoSuchOpGradscope")


def test_scratch_func_graph():
    outer = tf.Graph()
    scratch = private.scratch_func_graph("gradscope_scratch")
    scratch.outer_graph = outer
    with scratch.as_default():
        seed = tf.compat.v1.placeholder(tf.float32, [2])
        doubled = seed * 2.0
    assert isinstance(scratch, tf.Graph) and scratch.name == "gradscope_scratch"
    assert doubled.graph is scratch and scratch.outer_graph is outer


def test_is_control_flow_graph():
    seen = {}

    @tf.function
    def step(x):
        seen["outer"] = tf.compat.v1.get_default_graph()

        def branch():
            seen["branch"] = tf.compat.v1.get_default_graph()
            return x + 1.0

        return tf.cond(x > 0.0, branch, lambda: x)

    step.get_concrete_function(tf.TensorSpec([], tf.float32))
    assert private.is_control_flow_graph(seen["branch"])
    assert not private.is_control_flow_graph(seen["outer"])


def test_in_xla_context():
    seen = {}

    def body(key):
        def fn(x):
            seen[key] = private.in_xla_context(tf.compat.v1.get_default_graph())
            return x

        return fn

    tf.function(body("xla"), jit_compile=True).get_concrete_function(tf.TensorSpec([], tf.float32))
    tf.function(body("plain")).get_concrete_function(tf.TensorSpec([], tf.float32))
    assert seen == {"xla": True, "plain": False}


def _cond_graph():
    @tf.function
    def step(x):
        return tf.cond(x > 0.0, lambda: x + 1.0, lambda: x)

    graph = step.get_concrete_function(tf.TensorSpec([], tf.float32)).graph
    return graph, next(op for op in graph.get_operations() if op.type in ("If", "StatelessIf"))


def test_cond_true_branch():
    graph, cond = _cond_graph()
    branch = private.cond_true_branch(cond)
    assert isinstance(branch, tf.Graph) and "AddV2" in {op.type for op in branch.get_operations()}
    plain = next(op for op in graph.get_operations() if op.type == "Placeholder")
    assert private.cond_true_branch(plain) is None


def test_keep_cond_as_call():
    _, cond = _cond_graph()
    private.keep_cond_as_call(cond)
    assert cond.get_attr("_lower_using_switch_merge") is False


def test_count_traces_apart():
    def user_step(x):
        return x + 1

    def variants():
        made = []
        for mode in ("plain", "recorded"):

            def variant(*args):
                return user_step(*args)

            functools.update_wrapper(variant, user_step)
            variant.__name__ = f"user_step_{mode}"
            made.append(variant)
        return made

    plain, recorded = variants()
    # The premise: tf.function keys its retrace count on the code behind `__wrapped__`.
    same = [tf.function(v)._key_for_call_stats for v in variants()]
    assert same[0] is same[1] is user_step.__code__, (
        "tf.function no longer counts traces per __wrapped__ code"
    )
    for variant in (plain, recorded):
        private.count_traces_apart(variant)
        assert not hasattr(variant, "__wrapped__") and variant.__code__.co_name == variant.__name__
        assert variant(1) == 2
    assert tf.function(plain)._key_for_call_stats is plain.__code__
    assert plain.__code__ is not recorded.__code__


# ----- summary writers ---------------------------------------------------------


def _events(logdir):
    tags = []
    for path in sorted(glob.glob(os.path.join(logdir, "*tfevents*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            tags.extend(value.tag for value in event.summary.value)
    return tags


def test_has_default_writer(tmp_path):
    with private.default_writer_set(None):
        assert not private.has_default_writer()
    with tf.summary.create_file_writer(str(tmp_path)).as_default():
        assert private.has_default_writer()


def test_default_writer(tmp_path):
    before = private.default_writer()
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        assert private.default_writer() is writer
    assert private.default_writer() is before


def test_default_writer_set(tmp_path):
    before = private.default_writer()
    writer = tf.summary.create_file_writer(str(tmp_path))
    with private.default_writer_set(writer):
        assert private.default_writer() is writer
        assert bool(tf.summary.scalar("x", 1.0, step=0))
    assert private.default_writer() is before
    with pytest.raises(RuntimeError), private.default_writer_set(writer):
        raise RuntimeError("restored on the way out")
    assert private.default_writer() is before
    writer.flush()
    assert _events(str(tmp_path)) == ["x"]


def test_writer_resource(tmp_path):
    handle = private.writer_resource(tf.summary.create_file_writer(str(tmp_path)))
    assert handle.dtype == tf.resource


def test_close_writer_file(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path), max_queue=1000, flush_millis=10**9)
    with writer.as_default():
        tf.summary.scalar("kept", 1.0, step=0)
    private.close_writer_file(writer)  # closing flushes the held record
    assert _events(str(tmp_path)) == ["kept"]


def test_open_writer_file(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    writer = tf.summary.create_file_writer(str(first))
    private.close_writer_file(writer)
    private.open_writer_file(
        writer, str(second), max_queue=1000, flush_millis=10**9, filename_suffix=".v2"
    )
    with private.default_writer_set(writer):
        tf.summary.scalar("moved", 1.0, step=0)
    writer.flush()
    assert [os.path.basename(p).endswith(".v2") for p in glob.glob(str(second / "*tfevents*"))] == [
        True
    ]
    assert _events(str(second)) == ["moved"] and _events(str(first)) == []


def test_op_determinism_enabled():
    # In a child: op determinism cannot be turned off again in this process.
    code = (
        "import tensorflow as tf\nfrom tb_gradscope import _tf_private as p\n"
        "before = p.op_determinism_enabled()\ntf.config.experimental.enable_op_determinism()\n"
        "print(before, p.op_determinism_enabled())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["False", "True"]


# ----- tf.distribute -------------------------------------------------------------


def test_is_replica_stop():
    from tensorflow.python.distribute import mirrored_run

    assert private.is_replica_stop(mirrored_run._RequestedStop())
    assert not private.is_replica_stop(tf.errors.CancelledError(None, None, "cancelled"))


def test_unmirrored_variable():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        mirrored = tf.Variable(1.0)
        plain = private.unmirrored_variable(initial_value=2.0, name="plain")
    assert isinstance(mirrored, tf.distribute.DistributedValues)
    assert isinstance(plain, tf.Variable) and not isinstance(plain, tf.distribute.DistributedValues)
    assert float(plain.numpy()) == 2.0


# ----- tapes, variables, optimizers ------------------------------------------------


def test_tape_is_recording():
    tape = tf.GradientTape()
    with tape:
        assert private.tape_is_recording(tape)
        with tape.stop_recording():
            assert not private.tape_is_recording(tape)
    assert not private.tape_is_recording(tape)
    assert private.tape_is_recording(object()) is False


def test_tape_is_persistent():
    assert private.tape_is_persistent(tf.GradientTape(persistent=True))
    assert not private.tape_is_persistent(tf.GradientTape())
    assert private.tape_is_persistent(object())  # unknown: taken as persistent


def test_keras_inner_variable():
    inner = private.keras_inner_variable(keras.Variable(np.ones([2], np.float32)))
    assert isinstance(inner, tf.Variable) and inner.shape == (2,)
    assert private.keras_inner_variable(tf.Variable(1.0)) is None


def test_ref_variable_tensor():
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.variable_scope("net", use_resource=False):
            w = tf.compat.v1.get_variable("w", [2])
        resource = tf.Variable(1.0)
    ref = private.ref_variable_tensor(w)
    assert ref is not None and ref.dtype.name == "float32_ref"
    assert private.ref_variable_tensor(resource) is None


def test_ema_decay():
    assert private.ema_decay(tf.train.ExponentialMovingAverage(0.99)) == 0.99


def test_optimizer_built_variables():
    v = keras.Variable(np.ones([2], np.float32))
    opt = keras.optimizers.Adam()
    opt.build([v])
    assert [w is v for w in private.optimizer_built_variables(opt)] == [True]
    assert private.optimizer_built_variables(object()) is None


# ----- TF1 graphs ---------------------------------------------------------------------


def test_SessionInterface():  # noqa: N802 - named after the symbol
    assert issubclass(tf.compat.v1.Session, private.SessionInterface)
    assert issubclass(RecordingSession, private.SessionInterface)
    assert inspect.isclass(private.SessionInterface)


def _v1_graph():
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.variable_scope("net", use_resource=False):
            w = tf.compat.v1.get_variable("w", [2, 2])
        read = tf.identity(w)
        y = tf.matmul(tf.ones([1, 2]), read)
    return graph, w, read, y


def test_is_ref_dtype():
    _, w, read, _ = _v1_graph()
    assert private.is_ref_dtype(private.ref_variable_tensor(w).dtype)
    assert not private.is_ref_dtype(read.dtype)


def test_in_control_flow():
    graph, _, _, y = _v1_graph()
    assert not private.in_control_flow(y.op)
    tf.compat.v1.disable_control_flow_v2()  # a v1 cond: the context TF1 programs build
    try:
        with graph.as_default():
            branch = tf.compat.v1.cond(tf.constant(True), lambda: tf.identity(y), lambda: y)
    finally:
        tf.compat.v1.enable_control_flow_v2()
    assert private.in_control_flow(branch.op.inputs[0].op)


def test_update_input():
    graph, _, _, y = _v1_graph()
    with graph.as_default():
        other = tf.ones([2, 2])
    private.update_input(y.op, 1, other)
    assert y.op.inputs[1] is other


# ----- Keras 3 and tf_keras compiled losses ----------------------------------------


def _two_outputs(lib):
    inputs = lib.Input((3,))
    q = lib.layers.Dense(1, name="q")(inputs)
    aux = lib.layers.Dense(1, name="aux")(inputs)
    model = lib.Model(inputs, {"q": q, "aux": aux}, name="agent")
    model.compile(
        "sgd",
        loss={"q": "mse", "aux": "mse"},
        loss_weights={"q": 1.0, "aux": 0.5},
        steps_per_execution=2,
    )
    return model


def _train_once(model):
    y = np.zeros([8, 1], np.float32)
    model.fit(np.ones([8, 3], np.float32), {"q": y, "aux": y}, batch_size=4, verbose=0)


@pytest.fixture(scope="module")
def keras3_trained():
    model = _two_outputs(keras)
    _train_once(model)
    return model


@pytest.fixture(scope="module")
def tf_keras_trained():
    model = _two_outputs(tf_keras)
    _train_once(model)
    return model


def test_compile_loss(keras3_trained):
    assert private.compile_loss(keras3_trained) is not None
    assert private.compile_loss(keras.Sequential()) is None  # not compiled


def test_has_flat_losses(keras3_trained):
    assert private.has_flat_losses(private.compile_loss(keras3_trained))
    assert not private.has_flat_losses(object())


def test_flat_losses(keras3_trained):
    assert not private.flat_losses(
        private.compile_loss(_two_outputs(keras))
    )  # built inside the first traced step
    entries = private.flat_losses(private.compile_loss(keras3_trained))
    assert [(e.name, float(e.loss_weights)) for e in entries] == [("q", 1.0), ("aux", 0.5)]
    assert all(callable(e.loss) for e in entries)


def test_set_flat_losses(keras3_trained):
    container = private.compile_loss(keras3_trained)
    entries = private.flat_losses(container)
    replaced = [private.with_loss_fn(e, abs) for e in entries]
    private.set_flat_losses(container, replaced)
    assert private.flat_losses(container) == replaced
    private.set_flat_losses(container, entries)
    assert private.flat_losses(container) == entries


def test_with_loss_fn(keras3_trained):
    entries = private.flat_losses(private.compile_loss(keras3_trained))
    replaced = [private.with_loss_fn(e, abs) for e in entries]
    assert [e.loss for e in replaced] == [abs, abs] and [e.name for e in replaced] == ["q", "aux"]
    assert [e.loss for e in entries] != [abs, abs]  # a new entry, the old one untouched


def test_legacy_is_loss_container(tf_keras_trained):
    assert private.legacy_is_loss_container(tf_keras_trained.compiled_loss)
    assert not private.legacy_is_loss_container(private.compile_loss(_two_outputs(keras)))


def test_legacy_built(tf_keras_trained):
    assert not private.legacy_built(_two_outputs(tf_keras).compiled_loss)
    assert private.legacy_built(tf_keras_trained.compiled_loss)


def test_legacy_output_names(tf_keras_trained):
    assert sorted(private.legacy_output_names(tf_keras_trained.compiled_loss)) == ["aux", "q"]


def test_legacy_loss_weights(tf_keras_trained):
    container = tf_keras_trained.compiled_loss
    weights = dict(
        zip(private.legacy_output_names(container), private.legacy_loss_weights(container))
    )
    assert weights == {"q": 1.0, "aux": 0.5}


def test_legacy_loss_functions(tf_keras_trained):
    losses = private.legacy_loss_functions(tf_keras_trained.compiled_loss)
    assert len(losses) == 2 and all(callable(fn) for fn in losses)


def test_legacy_set_loss_functions(tf_keras_trained):
    container = tf_keras_trained.compiled_loss
    losses = private.legacy_loss_functions(container)
    private.legacy_set_loss_functions(container, [abs, abs])
    assert private.legacy_loss_functions(container) == [abs, abs]
    private.legacy_set_loss_functions(container, losses)
    assert private.legacy_loss_functions(container) == losses


def test_legacy_steps_per_execution(tf_keras_trained):
    assert int(tf.convert_to_tensor(private.legacy_steps_per_execution(tf_keras_trained))) == 2


def test_tf_function_options():
    compiled = tf.function(lambda x: x, jit_compile=True, reduce_retracing=True)
    options = private.tf_function_options(compiled)
    assert options["jit_compile"] is True and options["reduce_retracing"] is True
    assert options["autograph"] is True and options["input_signature"] is None
    assert private.tf_function_options(lambda x: x) is None


def test_every_name_of_the_module_has_its_test():
    tree = ast.parse(pathlib.Path(private.__file__).read_text())
    public = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)} | {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Name) and target.id != "__all__"
    }
    public = {name for name in public if not name.startswith("_")}
    assert public == set(private.__all__), (
        "public names outside __all__ (or __all__ naming none): "
        + str(public ^ set(private.__all__))
    )
    missing = [name for name in private.__all__ if f"test_{name}" not in globals()]
    assert missing == [], f"no test for: {missing}"
