"""The recorder's own gradients read reference variables as the run call found them.

Under `tf.compat.v1.disable_v2_behavior()` (or `use_resource=False`) a variable
is a reference variable: its read (`w/read`) and the Identity / Reshape ops
after it alias the variable's buffer, and the optimizer's apply ops overwrite
that buffer in place. `minimize` gates its own gradients so an apply runs only
after every gradient op reading that variable has run; the recorder's own
`tf.gradients` ops, fetched in the same run call, are not gated, so they may
read a weight the call already updated: norms off by a few per cent that
change between identical runs.

`rewire` points every input of the recorder's gradient ops that aliases a
reference variable at a copy of that variable instead (one flat resource
variable for all of them), and returns the op that refreshes the copy. The
recorder runs it in a small call just before each run call that fetches such
a table, so the table is `tf.gradients` at the weights and feed of that call,
exactly as with resource variables. Ops inside a TF1 `cond` / `while_loop`
body are left as they are (rewiring them would need their control-flow
frames); their tables may still race.
"""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from tb_gradscope._tf_private import (
    in_control_flow,
    is_ref_dtype,
    update_input,
)

# Ops whose output shares their first input's buffer (no copy): a chain of them
# from a reference variable's read still aliases the variable.
_ALIASING = ("Identity", "Reshape", "Squeeze", "ExpandDims", "StopGradient", "PreventGradient")


def aliased_variable(tensor: tf.Tensor) -> tf.Operation | None:
    """The reference-variable op whose buffer `tensor` may alias, else None."""
    if is_ref_dtype(tensor.dtype):
        return None  # a ref input itself: the op wants the reference, leave it
    op = tensor.op
    while op.type in _ALIASING and op.inputs:
        source = op.inputs[0]
        if is_ref_dtype(source.dtype):
            return source.op if source.op.type in ("VariableV2", "Variable") else None
        op = source.op
    return None


def rewire(
    graph: tf.Graph, new_ops: Sequence[tf.Operation], name: str
) -> tuple[tf.Operation | None, frozenset[tf.Operation]]:
    """Rewires `new_ops` (the recorder's gradient ops) off reference-variable
    aliases. Returns the op refreshing their copy (None when none reads one)
    and the ops rewired."""
    uses: list[tuple[tf.Operation, int, tf.Tensor, tf.Operation]] = []
    for op in new_ops:
        if in_control_flow(op):
            continue
        for i, tensor in enumerate(op.inputs):
            var_op = aliased_variable(tensor)
            if var_op is not None and tensor.dtype == var_op.outputs[0].dtype.base_dtype:
                uses.append((op, i, tensor, var_op))
    if not uses:
        return None, frozenset()
    variables = list(dict.fromkeys(var_op for _, _, _, var_op in uses))
    with graph.as_default(), tf.name_scope(name):
        reads = [tf.identity(v.outputs[0]) for v in variables]
        flat = tf.concat([tf.reshape(r, [-1]) for r in reads], 0)
        copy = tf.compat.v1.Variable(
            tf.zeros_like(flat),
            trainable=False,
            collections=["tb_gradscope_snapshots"],
            validate_shape=False,
            name="ref_reads",
            use_resource=True,
        )
        refresh = copy.assign(flat, read_value=False)
        sizes = [tf.size(r) for r in reads]
        parts = tf.split(copy.value(), tf.stack(sizes), num=len(reads))
        copies = {v: tf.reshape(part, tf.shape(r)) for v, part, r in zip(variables, parts, reads)}
        for op, i, tensor, var_op in uses:
            replacement = copies[var_op]
            if tensor.op.type != "Identity":  # a reshaped alias: the same view of the copy
                replacement = tf.reshape(replacement, tf.shape(tensor))
            update_input(op, i, replacement)
    return refresh, frozenset(op for op, _, _, _ in uses)
