"""Checks and normalises what callers hand to the analysis: losses and variables.

Every error names the loss or variable at fault and says what to pass instead.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.analysis._flatten import FlatGraph, is_trainable
from tb_gradscope.scopes import variable_name


class AnalysisError(ValueError):
    """The analysis cannot run on what it was given; the message says why and the fix."""


@dataclasses.dataclass(frozen=True)
class LossSpec:
    name: str
    tensor: Any
    kind: str  # "loss" or "start_point"


def normalize_losses(losses: Any, graph: tf.Graph) -> list[LossSpec]:
    """Losses as (name, tensor, kind); accepts a mapping or (name, value) pairs."""
    pairs = list(losses.items()) if isinstance(losses, Mapping) else list(losses or ())
    if not pairs:
        raise AnalysisError(
            "no losses given: pass a mapping of loss name to a scalar tensor of the "
            "traced graph, e.g. {'td': loss}"
        )
    seen: set[str] = set()
    specs = []
    for item in pairs:
        try:
            name, value = item
        except (TypeError, ValueError):
            raise AnalysisError(
                f"losses entry {item!r} is not a (name, tensor) pair; pass a mapping "
                "{name: tensor} or a list of (name, tensor) pairs"
            ) from None
        name = str(name)
        if name in seen:
            raise AnalysisError(f"duplicate loss name '{name}': give each loss a unique name")
        seen.add(name)
        kind = "loss"
        tensor = value
        if hasattr(value, "tensor") and hasattr(value, "output_gradients"):
            kind, tensor = "start_point", value.tensor
        specs.append(LossSpec(name, _check_tensor(name, tensor, graph), kind))
    return specs


def _check_tensor(name: str, tensor: Any, graph: tf.Graph) -> Any:
    if not isinstance(tensor, tf.Tensor) or not hasattr(tensor, "op") or _is_eager(tensor):
        raise AnalysisError(
            f"loss '{name}' is {type(tensor).__name__}, not a tensor of the traced graph; "
            "pass a graph tensor (concrete_fn.structured_outputs[...] for a tf.function, "
            "the loss tensor itself for a TF1 graph)"
        )
    if tensor.graph is not graph:
        raise AnalysisError(
            f"loss '{name}' ({tensor.name}) belongs to graph {tensor.graph!r}, not to the "
            "graph being analysed; pass the tensor from the same concrete function or tf.Graph"
        )
    if not is_trainable(tensor.dtype):
        raise AnalysisError(
            f"loss '{name}' ({tensor.name}) has dtype {tensor.dtype.name}, which carries no "
            "gradient; pass a floating-point loss"
        )
    return tensor


def _is_eager(tensor: Any) -> bool:
    try:
        tensor.op  # noqa: B018 - EagerTensor raises here
    except AttributeError:
        return True
    return False


def handle_of(variable: Any) -> Any:
    """The resource handle (or TF1 ref tensor) behind a tf.Variable or Keras 3 variable."""
    for candidate in (
        variable,
        getattr(variable, "value", None),
        private.keras_inner_variable(variable),
    ):
        if candidate is None:
            continue
        try:
            handle = getattr(candidate, "handle", None)
        except Exception:  # noqa: BLE001 - TF1 ref variables raise on .handle
            handle = None
        if handle is not None:
            return handle
        ref = private.ref_variable_tensor(candidate)
        if ref is not None:
            return ref
    return None


def match_variables(
    flat: FlatGraph, graph: tf.Graph, variable_scopes: Sequence[tuple[Any, str]]
) -> tuple[dict[int, list[int]], list[str], list[str]]:
    """Matches each variable to its node(s) in `flat`.

    Returns (node -> indices of variable_scopes), variable names, and the
    names of variables the graph does not use. A FuncGraph sees a variable
    through `graph.captures` (matched by id of the outer handle); a TF1 graph
    through its VarHandleOp / VariableV2 op.
    """
    pairs = list(variable_scopes or ())
    if not pairs:
        raise AnalysisError(
            "no variables given: pass variable_scopes=[(variable, leaf_scope), ...] for "
            "the model's variables (TF1: tb_gradscope.scopes.leaf_scope(v.name))"
        )
    captured = {id(outer): inner for outer, inner in getattr(graph, "captures", ())}
    by_node: dict[int, list[int]] = {}
    names: list[str] = []
    missing: list[str] = []
    for i, pair in enumerate(pairs):
        try:
            variable, scope = pair
        except (TypeError, ValueError):
            raise AnalysisError(
                f"variable_scopes entry {i} is {pair!r}, not a (variable, scope) pair"
            ) from None
        if not isinstance(scope, str) or not scope:
            raise AnalysisError(
                f"variable '{getattr(variable, 'name', variable)}' has scope {scope!r}; "
                "pass a non-empty scope name such as 'online/l1'"
            )
        names.append(variable_name(str(getattr(variable, "path", None) or variable.name)))
        nodes = _variable_nodes(flat, graph, captured, variable)
        if not nodes:
            missing.append(names[-1])
        for node in nodes:
            by_node.setdefault(node, []).append(i)
    return by_node, names, missing


def _variable_nodes(flat: FlatGraph, graph: tf.Graph, captured: dict, variable: Any) -> set[int]:
    """Nodes of the variable's handle; every replica's for a tf.distribute variable."""
    nodes = set()
    for candidate in [variable] + _replica_copies(variable):
        handle = handle_of(candidate)
        if handle is None:
            continue
        inner = captured.get(id(handle))
        if inner is not None:
            nodes.add(flat.node_of(inner))
        elif not _is_eager(handle) and handle.graph is graph and id(handle.op) in flat.root_ops:
            nodes.add(flat.root_ops[id(handle.op)])
    return nodes


def _replica_copies(variable: Any) -> list[Any]:
    """A tf.distribute variable's per-device copies (also behind a Keras 3 variable).

    Their handles are what a distributed step's graph captures; the variable's
    own `.handle` depends on the replica context it is asked from.
    """
    for candidate in (variable, private.keras_inner_variable(variable)):
        if isinstance(candidate, tf.distribute.DistributedValues):
            return list(candidate.values)
    return []
