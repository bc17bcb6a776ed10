"""GraphRecorder's arguments, checked: each error names the argument and the fix.

Turns what the user passed (tensors, ops or names; dicts keyed by loss) into
the graph elements the recorder builds on, before anything is added to the
user's graph.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope.integrations.tf1 import _graph as graphs
from tb_gradscope.record._losses import StartPoint
from tb_gradscope.scopes import ScopeSpec


def check_plain_args(logdir: Any, every_n_steps: Any, scopes: Any, analyze: Any) -> None:
    """The arguments that need no graph: types and ranges."""
    if not isinstance(logdir, (str, os.PathLike)) or not os.fspath(logdir):
        raise ValueError(
            f"logdir must be a directory path (str or os.PathLike), got {_shown(logdir)}; "
            "e.g. GraphRecorder('logs/run1', ...)"
        )
    if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
        raise ValueError(
            f"every_n_steps must be an int >= 1 (record steps divisible by it), got {every_n_steps!r}"
        )
    if scopes is not None and not isinstance(scopes, ScopeSpec):
        raise ValueError(
            f"scopes must be a tb_gradscope.scopes.ScopeSpec, got {_shown(scopes)}; "
            "e.g. scopes=ScopeSpec(exclude=('Actor/target/*',), max_depth=2)"
        )
    if not isinstance(analyze, bool):
        raise ValueError(f"analyze must be True or False, got {analyze!r}")


def check_variables(variables: Any) -> list[tf.Variable] | None:
    """`variables` as a list of variables (None: the graph's default)."""
    if variables is None:
        return None
    if isinstance(variables, (tf.Variable, str, bytes, Mapping)) or not isinstance(
        variables, (Sequence, set, frozenset)
    ):
        raise ValueError(
            f"variables must be a list of tf.Variable, got {_shown(variables)}; "
            "e.g. variables=tf.compat.v1.global_variables()"
        )
    listed = list(variables)
    wrong = [v for v in listed if not isinstance(v, tf.Variable)]
    if wrong:
        raise ValueError(
            f"variables must hold only tf.Variable objects, got {_shown(wrong[0])} "
            f"among them; pass e.g. tf.compat.v1.global_variables()"
        )
    return listed


def graph_of(losses: Any) -> tf.Graph:
    """The graph holding the losses (the default graph if only names are given)."""
    if not isinstance(losses, Mapping):
        raise ValueError(
            f"losses must be a dict {{name: loss tensor}}, got {_shown(losses)}; "
            "e.g. losses={'td': loss}"
        )
    if not losses:
        raise ValueError("GraphRecorder needs at least one loss: losses={'td': loss}")
    for value in losses.values():
        tensor = value.tensor if isinstance(value, StartPoint) else value
        if isinstance(tensor, tf.Tensor):
            return tensor.graph
    return tf.compat.v1.get_default_graph()


def resolve_start(graph: tf.Graph, name: Any, value: Any) -> tuple[tf.Tensor, Any]:
    """(tensor, grad_ys) of a loss or a gradient start point."""
    if isinstance(value, StartPoint):
        tensor = graphs.as_tensor(graph, value.tensor, f"start point '{name}'")
        grad_ys = value.output_gradients
        if grad_ys is not None:
            grad_ys = graphs.as_tensor(graph, grad_ys, f"output_gradients of '{name}'")
            if not grad_ys.shape.is_compatible_with(tensor.shape):
                raise ValueError(
                    f"start point '{name}': output_gradients have shape "
                    f"{grad_ys.shape}, the tensor has shape {tensor.shape}; pass "
                    "one gradient per element, as tf.gradients(..., grad_ys=) needs"
                )
        return tensor, grad_ys
    tensor = graphs.as_tensor(graph, value, f"loss '{name}'")
    if not tensor.dtype.is_floating:
        raise ValueError(f"loss '{name}' has dtype {tensor.dtype.name}; pass a floating-point loss")
    if tensor.shape.rank not in (None, 0):
        raise ValueError(
            f"loss '{name}' is not a scalar (shape {tensor.shape}); pass "
            "tf.reduce_mean(...) of it, or StartPoint(tensor, output_gradients=g) to "
            "start the gradient from it with explicit output gradients"
        )
    return tensor, None


def resolve_train_ops(
    graph: tf.Graph, starts: Mapping[str, Any], train_ops: Any
) -> dict[str, tf.Operation | None]:
    """{loss: the op that trains it, or None}, from the user's `train_ops`."""
    if train_ops is not None and not isinstance(train_ops, Mapping):
        raise ValueError(
            f"train_ops must be a dict {{loss name: train op}}, got {_shown(train_ops)}; "
            f"e.g. train_ops={{{next(iter(starts))!r}: train_op}}"
        )
    if not train_ops:
        raise ValueError(
            "GraphRecorder needs train_ops: name the op that trains each loss, "
            "e.g. train_ops={'td': train_op}; steps are counted in runs of them"
        )
    unknown = sorted(set(map(str, train_ops)) - set(starts))
    if unknown:
        raise ValueError(
            f"train_ops names {unknown}, which are not losses ({sorted(starts)}); "
            "key train_ops by the loss each op trains"
        )
    named = {str(k): v for k, v in train_ops.items()}
    return {
        loss: (
            graphs.as_operation(graph, named[loss], f"train op of loss '{loss}'")
            if loss in named
            else None
        )
        for loss in starts
    }


def _shown(value: Any) -> str:
    """A short description of a wrong argument: its type, and its value if small."""
    text = repr(value)
    return f"{type(value).__name__} {text}" if len(text) <= 60 else type(value).__name__
