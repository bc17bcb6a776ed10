"""Every private TensorFlow and Keras symbol the package uses, each behind one small function.

Each function says which internal it touches and why no public API does the
job. A TensorFlow, Keras or tf_keras upgrade that moves one fails here, and in
tests/unit/test_tf_private.py, which has one test per name of `__all__`;
tests/unit/test_private_api.py fails when any other module imports from
`tensorflow.python`, `keras.src` or `tf_keras.src`, or reads a private
attribute of an object not its own. Write side only: `format/`, `read/`,
`plugin/`, `commands/`, `rules/` never import this module (nor tensorflow).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2
from tensorflow.python.client import session as _session
from tensorflow.python.distribute import mirrored_run
from tensorflow.python.framework import config as _config
from tensorflow.python.framework import func_graph as _func_graph
from tensorflow.python.framework import function_def_to_graph as _function_def_to_graph
from tensorflow.python.framework import ops as _ops
from tensorflow.python.ops import (
    control_flow_util,
    gen_summary_ops,
    resource_variable_ops,
    summary_ops_v2,
)
from tensorflow.python.ops.control_flow_v2_func_graphs import ControlFlowFuncGraph

__all__ = [
    "SessionInterface",
    "library_function",
    "function_def_to_graph",
    "gradient_function",
    "scratch_func_graph",
    "is_control_flow_graph",
    "in_xla_context",
    "cond_true_branch",
    "keep_cond_as_call",
    "count_traces_apart",
    "tf_function_options",
    "has_default_writer",
    "default_writer",
    "default_writer_set",
    "writer_resource",
    "close_writer_file",
    "open_writer_file",
    "op_determinism_enabled",
    "is_replica_stop",
    "unmirrored_variable",
    "tape_is_recording",
    "tape_is_persistent",
    "keras_inner_variable",
    "ref_variable_tensor",
    "ema_decay",
    "optimizer_built_variables",
    "is_ref_dtype",
    "in_control_flow",
    "update_input",
    "compile_loss",
    "has_flat_losses",
    "flat_losses",
    "set_flat_losses",
    "with_loss_fn",
    "legacy_loss_functions",
    "legacy_set_loss_functions",
    "legacy_is_loss_container",
    "legacy_built",
    "legacy_output_names",
    "legacy_loss_weights",
    "legacy_steps_per_execution",
]

# ----- graphs, functions and gradients ---------------------------------------


def library_function(graph: Any, name: str) -> Any:
    """The function `name` in `graph`'s own library (`Graph._functions`), or None: TF has no public lookup by name."""
    return graph._functions.get(name) if hasattr(graph, "_functions") else None  # noqa: SLF001


def function_def_to_graph(definition: Any) -> Any:
    """A FuncGraph rebuilt from a FunctionDef (`function_def_to_graph`): no public API builds one."""
    return _function_def_to_graph.function_def_to_graph(definition)


def gradient_function(op_type: str) -> Any:
    """The gradient function registered for `op_type` (None after `tf.no_gradient`; LookupError
    when none is) from `ops.gradient_registry`: TF's gradient rules have no public lookup."""
    return _ops.gradient_registry.lookup(op_type)


def scratch_func_graph(name: str) -> Any:
    """An empty `FuncGraph` to build ops in, whose `outer_graph` may be set: `tf.function` offers no bare graph."""
    return _func_graph.FuncGraph(name)


def is_control_flow_graph(graph: Any) -> bool:
    """Whether `graph` is a `cond`/`while_loop` body (`ControlFlowFuncGraph`): no public test."""
    return isinstance(graph, ControlFlowFuncGraph)


def in_xla_context(graph: Any) -> bool:
    """Whether `graph` or a graph it is nested in compiles with XLA (`control_flow_util`): no public test."""
    return control_flow_util.GraphOrParentsInXlaContext(graph)


def cond_true_branch(op: Any) -> Any:
    """The true branch's FuncGraph that cond_v2 keeps on its If op (`Operation._true_graph`), or None: no public accessor."""
    return getattr(op, "_true_graph", None)


def keep_cond_as_call(op: Any) -> None:
    """Keeps a cond's If op a function call, never lowered to Switch/Merge (`Operation._set_attr`,
    attr `_lower_using_switch_merge`): TF sets that attr only itself."""
    op._set_attr("_lower_using_switch_merge", attr_value_pb2.AttrValue(b=False))  # noqa: SLF001


def count_traces_apart(fn: Callable[..., Any]) -> None:
    """Gives `fn` (made by `functools.update_wrapper`) a code object of its own, named `fn.__name__`:
    `tf.function` counts retraces per `__code__` found through `__wrapped__` (`Function._key_for_call_stats`)."""
    del fn.__wrapped__
    fn.__code__ = fn.__code__.replace(co_name=fn.__name__)


# ----- summary writers ---------------------------------------------------------


def has_default_writer() -> bool:
    """Whether a default summary writer is set (`summary_ops_v2.has_default_writer`): not in `tf.summary`."""
    return summary_ops_v2.has_default_writer()


def default_writer() -> Any:
    """The default summary writer, or None (`summary_ops_v2._summary_state`): not in `tf.summary`."""
    return summary_ops_v2._summary_state.writer  # noqa: SLF001


@contextlib.contextmanager
def default_writer_set(writer: Any) -> Iterator[None]:
    """`writer` as the default summary writer, without `writer.as_default()`'s exit flush, which
    adds a flush op to a traced step (`summary_ops_v2._summary_state`): no public way to skip it."""
    state = summary_ops_v2._summary_state  # noqa: SLF001
    previous, state.writer = state.writer, writer
    try:
        yield
    finally:
        state.writer = previous


def writer_resource(writer: Any) -> Any:
    """The resource handle behind a `tf.summary` file writer (`_ResourceSummaryWriter._resource`): never handed out."""
    return writer._resource  # noqa: SLF001


def close_writer_file(writer: Any) -> None:
    """Closes the event file behind `writer`'s resource, keeping the resource (`gen_summary_ops`): `close()` drops both."""
    gen_summary_ops.close_summary_writer(writer._resource)  # noqa: SLF001


def open_writer_file(
    writer: Any, logdir: str, max_queue: int, flush_millis: int, filename_suffix: str
) -> None:
    """(Re)creates the event file behind `writer`'s resource, which traced steps keep (`gen_summary_ops`):
    `tf.summary.create_file_writer` makes a new resource."""
    gen_summary_ops.create_summary_file_writer(
        writer._resource,
        logdir=logdir,
        max_queue=max_queue,
        flush_millis=flush_millis,  # noqa: SLF001
        filename_suffix=filename_suffix,
    )


def op_determinism_enabled() -> bool:
    """Whether `tf.config.experimental.enable_op_determinism()` is on (`config.is_op_determinism_enabled`): no public getter."""
    return _config.is_op_determinism_enabled()


# ----- tf.distribute -------------------------------------------------------------


def is_replica_stop(error: BaseException) -> bool:
    """Whether `error` is MirroredStrategy's signal to stop a replica (`mirrored_run._RequestedStop`): not exported."""
    return isinstance(error, mirrored_run._RequestedStop)  # noqa: SLF001


def unmirrored_variable(**args: Any) -> Any:
    """A `ResourceVariable` built directly (`resource_variable_ops`): `tf.Variable` goes through creator scopes."""
    return resource_variable_ops.ResourceVariable(**args)


# ----- tapes, variables, optimizers ------------------------------------------------


def tape_is_recording(tape: Any) -> bool:
    """Whether `tape`'s context is entered (`GradientTape._recording`): no public accessor."""
    return getattr(tape, "_recording", False)


def tape_is_persistent(tape: Any) -> bool:
    """Whether `tape` was made `persistent=True` (`GradientTape._persistent`), True when unknown: no public accessor."""
    return getattr(tape, "_persistent", True)


def keras_inner_variable(variable: Any) -> Any:
    """The backend variable a Keras 3 Variable wraps (`Variable._value`), or None: `.value` may autocast it."""
    return getattr(variable, "_value", None)


def ref_variable_tensor(variable: Any) -> Any:
    """The reference tensor of a TF1 `RefVariable` (`_variable`), or None: `.handle` raises on one."""
    return getattr(variable, "_variable", None)


def ema_decay(ema: Any) -> Any:
    """A `tf.train.ExponentialMovingAverage`'s decay (`_decay`): TF names it only privately."""
    return ema._decay  # noqa: SLF001


def optimizer_built_variables(optimizer: Any) -> Any:
    """The variables a Keras 3 optimizer was built for (`_trainable_variables`), or None: no public list."""
    return getattr(optimizer, "_trainable_variables", None)


# ----- TF1 graphs ---------------------------------------------------------------------

# `tf.compat.v1.Session`'s base class (`Saver.save` accepts any): not exported.
SessionInterface = _session.SessionInterface


def is_ref_dtype(dtype: tf.DType) -> bool:
    """A reference dtype (`float32_ref`, `DType._is_ref_dtype`): the tensor is a variable's buffer itself; no public test."""
    return bool(dtype._is_ref_dtype)  # noqa: SLF001


def in_control_flow(op: tf.Operation) -> bool:
    """Inside a TF1 `cond`/`while_loop` (`_get_control_flow_context`): its output may be dead or
    per-iteration; no public accessor."""
    return op._get_control_flow_context() is not None  # noqa: SLF001


def update_input(op: tf.Operation, index: int, tensor: tf.Tensor) -> None:
    """Makes `tensor` input `index` of `op`, an op the recorder built itself (`_update_input`): no public way to rewire an edge."""
    op._update_input(index, tensor)  # noqa: SLF001


# ----- Keras 3 compiled losses -----------------------------------------------------
# Keras offers no public way to the loss tensor of each compiled output: only its
# loss container computes them, and sums them in the same call, so the callback
# reads and replaces the container's per-output loss functions
# (integrations/keras/capture.py).


def compile_loss(model: Any) -> Any:
    """The model's CompileLoss (`model._compile_loss`, from `compile(loss=...)`), or None."""
    return getattr(model, "_compile_loss", None)


def has_flat_losses(container: Any) -> bool:
    """Whether `container` is a CompileLoss holding (or to hold) per-output entries (`_flat_losses`)."""
    return hasattr(container, "_flat_losses")


def flat_losses(container: Any) -> list[Any] | None:
    """A CompileLoss's per-output entries (path, loss, loss_weights, name; `_flat_losses`); None before it is built."""
    return container._flat_losses  # noqa: SLF001 - the only way to each output's loss


def set_flat_losses(container: Any, entries: list[Any] | None) -> None:
    """Replaces a CompileLoss's per-output entries (`_flat_losses`; restored with what flat_losses returned)."""
    container._flat_losses = entries  # noqa: SLF001


def with_loss_fn(entry: Any, loss_fn: Callable[..., Any]) -> Any:
    """A CompileLoss entry with another loss function (entries are namedtuples, `_replace`)."""
    return entry._replace(loss=loss_fn)


# ----- tf_keras (TF_USE_LEGACY_KERAS=1) compiled losses ---------------------------------


def legacy_loss_functions(container: Any) -> list[Any] | None:
    """A tf_keras LossesContainer's per-output loss objects (`_losses`, aligned with its output names)."""
    return getattr(container, "_losses", None)


def legacy_set_loss_functions(container: Any, losses: list[Any] | None) -> None:
    """Replaces a tf_keras LossesContainer's per-output loss objects (`_losses`)."""
    container._losses = losses  # noqa: SLF001


def legacy_is_loss_container(container: Any) -> bool:
    """Whether `container` (tf_keras `model.compiled_loss`) is a LossesContainer (`_losses`, `_built`)."""
    return hasattr(container, "_losses") and hasattr(container, "_built")


def legacy_built(container: Any) -> bool:
    """Whether a tf_keras LossesContainer has built its per-output losses (`_built`)."""
    return bool(container._built)  # noqa: SLF001


def legacy_output_names(container: Any) -> list[str]:
    """A tf_keras LossesContainer's output names (`_output_names`)."""
    return list(getattr(container, "_output_names", None) or [])


def legacy_loss_weights(container: Any) -> list[Any]:
    """A tf_keras LossesContainer's loss weights (`_loss_weights`), aligned with its output names."""
    return list(getattr(container, "_loss_weights", None) or [])


def legacy_steps_per_execution(model: Any) -> Any:
    """tf_keras keeps steps_per_execution in a private variable (`_steps_per_execution`; Keras 3: a public int)."""
    return getattr(model, "_steps_per_execution", None)


def tf_function_options(fn: Any) -> dict[str, Any] | None:
    """The arguments a `tf.function` was made with that `Recorder.watch` keeps
    (`Function._jit_compile`, `_autograph`, `_reduce_retracing`: no public
    getter), or None when `fn` is not one."""
    if not hasattr(fn, "python_function") or not hasattr(fn, "get_concrete_function"):
        return None
    return {
        "input_signature": fn.input_signature,
        "jit_compile": getattr(fn, "_jit_compile", None),
        "autograph": getattr(fn, "_autograph", True),
        "reduce_retracing": getattr(fn, "_reduce_retracing", False),
    }
