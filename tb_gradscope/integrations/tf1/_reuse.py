"""The gradient a train op already computes, used only where it provably is ours.

`minimize` applies `tf.gradients(loss, var_list)`; the recorder's own
`tf.gradients` of the same loss differentiates it a second time in the same
run call. A variable's gradient is taken from the train op's apply op instead
only when the tensor that apply op consumes is *proved* to compute the same
value as the recorder's own gradient: walking both backwards together, every
pair of ops is the same stateless op type with the same attributes, device and
output index, fed by inputs that are again the same value, down to tensors the
two share (the forward pass). Identity ops (the `gate_gradients` tuples) pass
their input through and are skipped; control inputs only order stateless ops
and are ignored (ops inside a TF1 `cond` or `while_loop`, whose outputs may be
dead, never match).

A clipped, scaled, averaged or otherwise changed gradient, a train op of
another loss (or of a sum of losses), a sparse update, a variable updated
twice, any stateful op on the way (a variable read, a random op), or a ref
variable's value (`use_resource=False`, `disable_v2_behavior()`: an apply op
may overwrite it in place while other ops still read it) makes the proof fail,
and the recorder keeps its own gradient for that variable.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import tensorflow as tf

from tb_gradscope._tf_private import in_control_flow as _in_control_flow
from tb_gradscope._tf_private import is_ref_dtype
from tb_gradscope.integrations.tf1._graph import apply_ops, variable_op

_GRADIENT_ARGS = ("grad", "delta")  # the gradient input of dense apply ops
# Attributes that say where an op runs or how it is ordered, not what it computes:
# colocation, and the mark `gate_gradients`' control dependencies leave.
_IGNORED_ATTRS = ("_class", "_has_manual_control_dependencies")


def applied_gradients(train_op: tf.Operation) -> dict[tf.Operation, tf.Tensor]:
    """{variable op: the gradient tensor its apply op consumes} for the variables
    `train_op` updates through exactly one dense apply op."""
    found: dict[tf.Operation, list[tf.Tensor]] = {}
    for op in apply_ops(train_op):
        source = variable_op(op.inputs[0])
        if source is not None and not _in_control_flow(op):
            found.setdefault(source, []).append(_gradient_input(op))
    return {
        var: grads[0] for var, grads in found.items() if len(grads) == 1 and grads[0] is not None
    }


def reusable(
    own: Sequence[tf.Tensor | None],
    variables: Sequence[tf.Variable],
    applied: Mapping[tf.Operation, tf.Tensor],
) -> list[tf.Tensor | None]:
    """`own` (the recorder's gradients, index-aligned with `variables`) with each
    gradient replaced by the applied one where `same_value` proves them equal."""
    out = list(own)
    proven: set[tuple[tf.Tensor, tf.Tensor]] = set()  # shared: the walks overlap
    for i, (grad, var) in enumerate(zip(own, variables)):
        theirs = applied.get(var.op)
        if isinstance(grad, tf.Tensor) and theirs is not None and same_value(grad, theirs, proven):
            out[i] = theirs
    return out


def same_value(
    a: tf.Tensor, b: tf.Tensor, proven: set[tuple[tf.Tensor, tf.Tensor]] | None = None
) -> bool:
    """True when `a` and `b` provably compute the same value in one run call
    (see the module docstring); False when that cannot be shown.

    `proven` holds pairs earlier calls proved equal (skipped here); this
    call's pairs are added to it when it returns True.
    """
    known = proven if proven is not None else set()
    seen: set[tuple[tf.Tensor, tf.Tensor]] = set()
    stack = [(a, b)]
    while stack:
        x, y = (_through_identity(t) for t in stack.pop())
        if x is y and _reads_ref(x.op):
            return False  # aliases a ref variable: what it holds depends on when it is read
        if x is y or (x, y) in seen or (x, y) in known:
            continue
        seen.add((x, y))
        if x.value_index != y.value_index or not _same_stateless_op(x.op, y.op):
            return False
        stack.extend(zip(x.op.inputs, y.op.inputs))
    known |= seen
    return True


def _same_stateless_op(x: tf.Operation, y: tf.Operation) -> bool:
    if x.type != y.type or x.device != y.device or len(x.inputs) != len(y.inputs):
        return False
    if x.op_def is None or x.op_def.is_stateful or _in_control_flow(x) or _in_control_flow(y):
        return False
    if _reads_ref(x) or any(t.dtype == tf.resource for t in x.inputs):
        return False  # reads a variable: its value depends on when it runs
    xa, ya = x.node_def.attr, y.node_def.attr
    keys = set(xa) | set(ya)
    return all(k in xa and k in ya and xa[k] == ya[k] for k in keys if k not in _IGNORED_ATTRS)


def _reads_ref(op: tf.Operation) -> bool:
    """Takes a ref variable as input (its output may alias the variable's buffer,
    which an apply op later in the same call overwrites in place)."""
    return any(is_ref_dtype(t.dtype) for t in op.inputs)


def _through_identity(tensor: tf.Tensor) -> tf.Tensor:
    """The tensor an Identity chain passes on (not through the read of a ref variable)."""
    while tensor.op.type == "Identity" and tensor.op.inputs:
        source = tensor.op.inputs[0]
        if source.dtype == tf.resource or _reads_ref(tensor.op) or _in_control_flow(tensor.op):
            break
        tensor = source
    return tensor


def _gradient_input(op: tf.Operation) -> tf.Tensor | None:
    """The gradient input of a dense apply op, None for sparse ones (their
    gradient comes as values and indices) and ops without such an input."""
    if "Sparse" in op.type:
        return None
    names = [arg.name for arg in op.op_def.input_arg]
    for name in _GRADIENT_ARGS:
        if name in names:
            return op.inputs[names.index(name)]
    return None
