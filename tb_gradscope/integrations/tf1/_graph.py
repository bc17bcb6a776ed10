"""Reading a TF1 graph: which variables are scopes, what a run call fetches,
which placeholders a tensor needs.

Pure graph inspection; builds no ops.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from typing import Any

import tensorflow as tf

# Ops that apply an optimizer update: input 0 is the variable, other variable
# inputs are the optimizer's slots (`.../Adam`, `.../RMSProp`, `.../Momentum`).
_APPLY_PREFIXES = ("Apply", "ResourceApply", "SparseApply", "ResourceSparseApply")
_VARIABLE_OP_TYPES = ("VarHandleOp", "VariableV2", "Variable")


def is_apply_op(op: tf.Operation) -> bool:
    """True for optimizer update ops (ApplyAdam, ResourceApplyRMSProp, ...)."""
    return op.type.startswith(_APPLY_PREFIXES)


def written_variables(
    train_op: tf.Operation, variables: Sequence[tf.Variable]
) -> list[tf.Variable]:
    """Those of `variables` that `train_op` updates through optimizer apply ops
    (the variable input of every apply op in `apply_ops(train_op)`)."""
    written = {variable_op(op.inputs[0]) for op in apply_ops(train_op)}
    return [v for v in variables if v.op in written]


def apply_ops(train_op: tf.Operation) -> list[tf.Operation]:
    """The optimizer apply ops that must run for `train_op` to run (its inputs
    and control inputs, walked backwards)."""
    found: list[tf.Operation] = []
    seen: set[tf.Operation] = set()
    stack = [train_op]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if is_apply_op(op):
            found.append(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return found


def slot_variable_ops(graph: tf.Graph) -> set[tf.Operation]:
    """Variable ops holding optimizer state for any apply op of the graph.

    Read from the graph's structure, not guessed from names: a variable fed to
    an apply op in any position but the first, as a handle (slots such as
    `.../Adam`, `.../RMSProp`) or as a read value (Adam's `beta1_power`).
    """
    slots: set[tf.Operation] = set()
    for op in graph.get_operations():
        if is_apply_op(op):
            for tensor in list(op.inputs)[1:]:
                source = variable_op(tensor, through_reads=True)
                if source is not None:
                    slots.add(source)
    return slots


def global_step_of(graph: tf.Graph) -> tf.Variable | None:
    """The graph's global step variable, or None.

    TF's `get_global_step` falls back to the tensor `global_step:0`, which for a
    resource variable (a TF1 graph built without `disable_v2_behavior`) is the
    handle, and raises `TypeError: ... does not have integer type`; the
    variable itself is then found among the graph's global variables.
    """
    try:
        return tf.compat.v1.train.get_global_step(graph)
    except TypeError:
        pass
    for var in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
        if var.op.name == "global_step" and var.dtype.base_dtype.is_integer:
            return var
    return None


def scoped_variables(
    graph: tf.Graph, variables: Sequence[tf.Variable] | None = None
) -> list[tf.Variable]:
    """The variables whose scopes gradscope reports.

    Default: the graph's trainable variables. Optimizer slots and the global
    step are never scopes, even when passed explicitly.
    """
    with graph.as_default():
        candidates = (
            list(variables) if variables is not None else tf.compat.v1.trainable_variables()
        )
    global_step = global_step_of(graph)
    slots = slot_variable_ops(graph)
    chosen = []
    seen = set()
    for var in candidates:
        if var.graph is not graph:
            raise ValueError(
                f"variable '{var.name}' belongs to another graph; pass variables "
                "of the graph that holds the losses"
            )
        if var.op in slots or var.op in seen:
            continue
        if global_step is not None and var.op is global_step.op:
            continue
        if not var.dtype.base_dtype.is_floating:
            continue
        seen.add(var.op)
        chosen.append(var)
    return chosen


def as_operation(graph: tf.Graph, element: Any, what: str) -> tf.Operation:
    """The op behind a train op given as an Operation, Tensor or name."""
    try:
        found = graph.as_graph_element(element, allow_tensor=True, allow_operation=True)
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(
            f"{what} is not an op or tensor of the recorded graph ({e}); pass the "
            "op returned by optimizer.minimize(...) or apply_gradients(...)"
        ) from None
    return found if isinstance(found, tf.Operation) else found.op


def as_tensor(graph: tf.Graph, element: Any, what: str) -> tf.Tensor:
    """A tensor of `graph`, given as a Tensor or a name such as 'loss:0'."""
    try:
        found = graph.as_graph_element(element, allow_tensor=True, allow_operation=False)
    except (TypeError, ValueError, KeyError) as e:
        raise ValueError(
            f"{what} is not a tensor of the recorded graph ({e}); pass the loss "
            "tensor itself, e.g. losses={'td': loss}"
        ) from None
    return found


def fetched_ops(graph: tf.Graph, fetches: Any) -> set[tf.Operation]:
    """The ops named by a `Session.run` fetch structure (lists, tuples, dicts).

    Elements that are not graph elements of `graph` are ignored: this only
    has to find the train ops the user named.
    """
    ops: set[tf.Operation] = set()
    stack = [fetches]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, tf.Operation):
            ops.add(item)
        elif isinstance(item, tf.Tensor):
            ops.add(item.op)
        elif isinstance(item, str):
            try:
                found = graph.as_graph_element(item, allow_tensor=True, allow_operation=True)
            except (TypeError, ValueError, KeyError):
                continue
            ops.add(found if isinstance(found, tf.Operation) else found.op)
    return ops


def replace_ops(
    graph: tf.Graph, fetches: Any, op_names: Collection[str], replacement: tf.Operation
) -> Any:
    """`fetches` with every element that names an op in `op_names` replaced."""
    if isinstance(fetches, dict):
        return type(fetches)(
            (k, replace_ops(graph, v, op_names, replacement)) for k, v in fetches.items()
        )
    if isinstance(fetches, (list, tuple)):
        items = [replace_ops(graph, v, op_names, replacement) for v in fetches]
        if hasattr(fetches, "_fields"):
            return type(fetches)(*items)
        return type(fetches)(items)
    if fetched_ops(graph, fetches) & {graph.get_operation_by_name(n) for n in op_names}:
        return replacement
    return fetches


def fed_ops(graph: tf.Graph, feed_dict: Any) -> set[tf.Operation]:
    """The placeholder ops a `feed_dict` feeds (keys as tensors or names)."""
    ops: set[tf.Operation] = set()
    for key in feed_dict or {}:
        keys = key if isinstance(key, (list, tuple)) else [key]
        for k in keys:
            if isinstance(k, tf.Tensor):
                ops.add(k.op)
            elif isinstance(k, str):
                try:
                    ops.add(graph.as_graph_element(k, allow_tensor=True).op)
                except (TypeError, ValueError, KeyError):
                    continue
            elif hasattr(k, "indices") and hasattr(k, "values"):
                ops.update(t.op for t in (k.indices, k.values, k.dense_shape))
    return ops


def required_placeholders(tensors: Iterable[tf.Tensor]) -> frozenset[tf.Operation]:
    """Placeholders (without defaults) that must be fed to compute `tensors`."""
    needed: set[tf.Operation] = set()
    seen: set[tf.Operation] = set()
    stack = [t.op for t in tensors]
    while stack:
        op = stack.pop()
        if op in seen:
            continue
        seen.add(op)
        if op.type == "Placeholder":
            needed.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return frozenset(needed)


def variable_op(tensor: tf.Tensor, through_reads: bool = False) -> tf.Operation | None:
    """The variable op a tensor is (or, with `through_reads`, reads), else None."""
    passes = ("Identity", "ReadVariableOp") if through_reads else ("Identity",)
    op = tensor.op
    while op.type in passes and op.inputs:
        op = op.inputs[0].op
    return op if op.type in _VARIABLE_OP_TYPES else None
