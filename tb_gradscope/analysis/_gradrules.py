"""How a gradient crosses one op: the same rules TF's gradient machinery follows.

`tf.gradients`/`GradientTape` stop at StopGradient/PreventGradient, at ops
registered with `tf.no_gradient` (gradient function None), at ops with no
gradient function at all (PyFunc from `tf.numpy_function`; EagerPyFunc from
`tf.py_function` has one), at integer/bool tensors, and wherever a gradient
function returns None (ArgMax, Round, a `tf.custom_gradient` grad_fn returning
None). `Rule` says which of these applies to a node of the FlatGraph; the
dtype rule lives on the edges (`FlatGraph.inputs[n][i][1]`).
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.analysis._flatten import SYNTHETIC, FlatGraph
from tb_gradscope.format.flowgraph import (
    CAUSE_NO_GRADIENT,
    CAUSE_NON_DIFFERENTIABLE,
    CAUSE_STOP_GRADIENT,
    CAUSE_UNKNOWN,
)

STOP_OPS = frozenset({"StopGradient", "PreventGradient"})
# Registered gradient functions that return None for every input.
NONE_GRADIENT_OPS = frozenset(
    {"ArgMax", "ArgMin", "FloorDiv", "TruncateDiv", "Floor", "Ceil", "Round", "Rint"}
)
# `tf.numpy_function` runs Python TF cannot differentiate: TF registers PyFunc
# as non-differentiable, but to the user it is "no gradient function".
NO_GRADIENT_OPS = frozenset({"PyFunc", "PyFuncStateless"})
# Ops whose output depends only on the *shape* of their inputs: no value
# dependence flows through them, and a gradient cut there blocks nothing.
STRUCTURAL_OPS = frozenset(
    {
        "Shape",
        "ShapeN",
        "Size",
        "Rank",
        "VariableShape",
        "ZerosLike",
        "OnesLike",
        "VarIsInitializedOp",
        "IsVariableInitialized",
        "BroadcastGradientArgs",
    }
)
CUSTOM_GRADIENT_ATTR = "_gradient_op_type"


@dataclasses.dataclass(frozen=True)
class Rule:
    """How the gradient crosses a node.

    `cause` set: the node cuts every input. Otherwise the gradient reaches every
    trainable input except `none_inputs` (a custom gradient returned None: a
    cut) and `rerouted` (the forward result of a custom gradient, whose
    gradient the grad_fn replaces: not a cut, just not followed).
    """

    cause: str | None = None
    none_inputs: frozenset[int] = frozenset()
    rerouted: frozenset[int] = frozenset()


PASS = Rule()


class GradientRules:
    """Rule lookup for the nodes of one FlatGraph, cached per op type."""

    def __init__(self, flat: FlatGraph):
        self._flat = flat
        self._by_type: dict[str, Rule] = {}
        self._by_node: dict[int, Rule] = {}

    def rule(self, node: int) -> Rule:
        hit = self._by_node.get(node)
        if hit is not None:
            return hit
        flat = self._flat
        op_type = flat.types[node]
        if node in flat.opaque:
            return Rule(CAUSE_UNKNOWN)
        if op_type == "IdentityN":
            rule = self._by_node[node] = _custom_gradient_rule(flat.ops[node])
            return rule
        rule = self._by_type.get(op_type)
        if rule is None:
            rule = self._by_type[op_type] = _type_rule(op_type)
        return rule


def _type_rule(op_type: str) -> Rule:
    if op_type in SYNTHETIC:
        return PASS
    if op_type in STOP_OPS:
        return Rule(CAUSE_STOP_GRADIENT)
    if op_type in NO_GRADIENT_OPS:
        return Rule(CAUSE_NO_GRADIENT)
    if op_type in NONE_GRADIENT_OPS:
        return Rule(CAUSE_NON_DIFFERENTIABLE)
    try:
        fn = private.gradient_function(op_type)
    except LookupError:
        return Rule(CAUSE_NO_GRADIENT)
    return PASS if fn is not None else Rule(CAUSE_NON_DIFFERENTIABLE)


def _custom_gradient_rule(op: tf.Operation) -> Rule:
    """Calls a custom gradient's grad_fn in a scratch graph to see its Nones.

    A plain IdentityN passes the gradient through. For one made by
    `tf.custom_gradient` the registered function is called on placeholders;
    if that fails (the grad_fn needs something only the real backward pass
    has) the node's gradient is reported as unknown rather than guessed.
    """
    try:
        key = op.get_attr(CUSTOM_GRADIENT_ATTR)
    except ValueError:
        return PASS
    key = key.decode() if isinstance(key, bytes) else str(key)
    try:
        fn = private.gradient_function(key)
    except LookupError:
        return Rule(CAUSE_NO_GRADIENT)
    if fn is None:
        return Rule(CAUSE_NON_DIFFERENTIABLE)
    scratch = private.scratch_func_graph("gradscope_custom_gradient")
    scratch.outer_graph = op.graph
    try:
        with scratch.as_default():
            seeds = [tf.compat.v1.placeholder(out.dtype, out.shape) for out in op.outputs]
            grads = list(fn(op, *seeds))
    except Exception:  # noqa: BLE001 - any failure of user code means "unknown"
        return Rule(CAUSE_UNKNOWN)
    none = set()
    rerouted = set()
    for i, grad in enumerate(grads[: len(op.inputs)]):
        if grad is None:
            # Outputs that are used are the custom function's results: their
            # forward computation is replaced by grad_fn, not cut.
            (rerouted if op.outputs[i].consumers() else none).add(i)
    if not none and not rerouted:
        return PASS
    return Rule(None, frozenset(none), frozenset(rerouted))
