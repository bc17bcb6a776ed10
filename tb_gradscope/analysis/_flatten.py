"""Flatten a traced graph and every function/control-flow body into one node list.

The analysis walks plain integer node ids instead of TF objects: one node per
op of the root graph and of every body it calls, each body inlined at its call
site. `While` loop variables become a `_LoopVar` node fed by the loop input, the
body output (the back edge) and the loop condition; `If`/`Case` outputs become
a `_Branch` node fed by each branch's output and the predicate; body input
placeholders become `_Link` nodes fed by what the call site passes in. Every
walk afterwards is a linear pass over these lists, with no recursion except
over body nesting depth.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private

LINK = "_Link"
LOOP_VAR = "_LoopVar"
BRANCH = "_Branch"
SYNTHETIC = frozenset({LINK, LOOP_VAR, BRANCH})
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
WHILE_OPS = frozenset({"While", "StatelessWhile"})
IF_OPS = frozenset({"If", "StatelessIf"})
CASE_OPS = frozenset({"Case", "StatelessCase"})

# dtypes a gradient can flow through (tensorflow/python/eager/backprop_util.py).
_TRAINABLE = frozenset(
    d.as_datatype_enum
    for d in (
        tf.float16,
        tf.float32,
        tf.float64,
        tf.bfloat16,
        tf.complex64,
        tf.complex128,
        tf.resource,
        tf.variant,
    )
)


@dataclasses.dataclass
class FlatGraph:
    """All ops of a graph and its bodies as parallel lists indexed by node id.

    `inputs[n]` holds `(source node, trainable)` per data input, `trainable`
    meaning the tensor's dtype can carry a gradient. `opaque` are call ops
    whose body could not be found (their gradient is unknown).
    """

    ops: list[Any] = dataclasses.field(default_factory=list)
    types: list[str] = dataclasses.field(default_factory=list)
    names: list[str] = dataclasses.field(default_factory=list)
    inputs: list[list[tuple[int, bool]]] = dataclasses.field(default_factory=list)
    control: list[list[int]] = dataclasses.field(default_factory=list)
    opaque: set[int] = dataclasses.field(default_factory=set)
    root_ops: dict[int, int] = dataclasses.field(default_factory=dict)
    root_outputs: dict[tuple[int, int], int] = dataclasses.field(default_factory=dict)
    _consumers: list[list[int]] | None = dataclasses.field(default=None, repr=False)

    def add(self, op: Any, op_type: str, name: str) -> int:
        self.ops.append(op)
        self.types.append(op_type)
        self.names.append(name)
        self.inputs.append([])
        self.control.append([])
        return len(self.ops) - 1

    def __len__(self) -> int:
        return len(self.ops)

    def node_of(self, tensor: Any) -> int:
        """The node producing `tensor` of the root graph (call outputs resolved)."""
        key = (id(tensor.op), tensor.value_index)
        if key in self.root_outputs:
            return self.root_outputs[key]
        return self.root_ops[id(tensor.op)]

    def consumers(self) -> list[list[int]]:
        """Forward adjacency over data edges (built once on first use, O(edges))."""
        if self._consumers is None or len(self._consumers) != len(self.ops):
            out: list[list[int]] = [[] for _ in self.ops]
            for n, ins in enumerate(self.inputs):
                for src, _ in ins:
                    out[src].append(n)
            self._consumers = out
        return self._consumers


def is_trainable(dtype: Any) -> bool:
    return dtype.base_dtype.as_datatype_enum in _TRAINABLE


def flatten(graph: tf.Graph) -> FlatGraph:
    """Flattens `graph` (a FuncGraph or a TF1 graph) with all bodies it calls."""
    flat = FlatGraph()
    _Flattener(flat).add_graph(graph, "", root=True)
    return flat


class _Flattener:
    def __init__(self, flat: FlatGraph):
        self.flat = flat
        self._trainable_cache: dict[Any, bool] = {}

    def _trainable(self, dtype: Any) -> bool:
        hit = self._trainable_cache.get(dtype)
        if hit is None:
            hit = self._trainable_cache[dtype] = is_trainable(dtype)
        return hit

    def add_graph(self, graph: Any, prefix: str, root: bool = False):
        """Adds every op of `graph`; returns (input nodes, output nodes)."""
        flat = self.flat
        by_op: dict[int, int] = {}
        by_output: dict[tuple[int, int], int] = {}
        pending: list[tuple[int, Any]] = []  # (node, outer tensor) links to resolve
        ops = graph.get_operations()
        for op in ops:
            op_type = op.type
            if (
                op_type in CALL_OPS
                or op_type in WHILE_OPS
                or op_type in IF_OPS
                or op_type in CASE_OPS
            ):
                if self._try_call(graph, op, prefix, by_output, pending):
                    continue
                node = flat.add(op, op_type, prefix + op.name)
                flat.opaque.add(node)
            else:
                node = flat.add(op, op_type, prefix + op.name)
            by_op[id(op)] = node
        trainable = self._trainable
        for op in ops:
            node = by_op.get(id(op))
            if node is None:
                continue
            if by_output:
                flat.inputs[node] = [
                    (self._resolve(x, by_op, by_output), trainable(x.dtype)) for x in op.inputs
                ]
            else:  # no call outputs to redirect: every producer is a plain op
                flat.inputs[node] = [(by_op[id(x.op)], trainable(x.dtype)) for x in op.inputs]
            controls = op.control_inputs
            if controls:
                flat.control[node] = [by_op[id(c)] for c in controls if id(c) in by_op]
        for node, tensor in pending:
            flat.inputs[node].append(
                (self._resolve(tensor, by_op, by_output), self._trainable(tensor.dtype))
            )
        if root:
            flat.root_ops = by_op
            flat.root_outputs = by_output
        inputs = [by_op[id(t.op)] for t in getattr(graph, "inputs", [])]
        outputs = [self._resolve(t, by_op, by_output) for t in getattr(graph, "outputs", [])]
        output_trainable = [self._trainable(t.dtype) for t in getattr(graph, "outputs", [])]
        return inputs, outputs, output_trainable

    @staticmethod
    def _resolve(tensor: Any, by_op: dict, by_output: dict) -> int:
        key = (id(tensor.op), tensor.value_index)
        hit = by_output.get(key)
        return hit if hit is not None else by_op[id(tensor.op)]

    def _try_call(self, graph, op, prefix, by_output, pending) -> bool:
        """Inlines a call's bodies; False (an opaque node, unknown gradient) on any failure."""
        flat, mark, pending_mark = self.flat, len(self.flat), len(pending)
        try:
            return self._add_call(graph, op, prefix, by_output, pending)
        except Exception:  # noqa: BLE001 - an unreadable body must not crash the analysis
            del flat.ops[mark:], flat.types[mark:], flat.names[mark:]
            del flat.inputs[mark:], flat.control[mark:], pending[pending_mark:]
            flat.opaque = {n for n in flat.opaque if n < mark}
            for j in range(len(op.outputs)):
                by_output.pop((id(op), j), None)
            return False

    def _add_call(self, graph, op, prefix, by_output, pending) -> bool:
        """Inlines the bodies of a call or control-flow op; False if one is missing."""
        flat = self.flat
        op_type = op.type
        base = prefix + op.name + "/"
        if op_type in CALL_OPS:
            body = _body_graph(graph, op.get_attr("f").name)
            if body is None:
                return False
            ins, outs, _ = self._inline(body, base)
            for node, tensor in zip(ins, op.inputs):
                pending.append((node, tensor))
            for j, node in enumerate(outs):
                by_output[(id(op), j)] = node
            return True
        if op_type in WHILE_OPS:
            cond = _body_graph(graph, op.get_attr("cond").name)
            body = _body_graph(graph, op.get_attr("body").name)
            if cond is None or body is None:
                return False
            loop_vars = [
                flat.add(op, LOOP_VAR, f"{base}loop_var_{j}") for j in range(len(op.inputs))
            ]
            body_in, body_out, body_trainable = self._inline(body, base + "body/")
            cond_in, cond_out, _ = self._inline(cond, base + "cond/")
            for j, (var, tensor) in enumerate(zip(loop_vars, op.inputs)):
                pending.append((var, tensor))
                if j < len(body_out):
                    flat.inputs[var].append((body_out[j], body_trainable[j]))
                flat.inputs[var].extend((c, False) for c in cond_out)
                by_output[(id(op), j)] = var
            for var, link in zip(loop_vars, body_in):
                flat.inputs[link].append((var, True))
            for var, link in zip(loop_vars, cond_in):
                flat.inputs[link].append((var, True))
            return True
        if op_type in IF_OPS:
            names = [op.get_attr("then_branch").name, op.get_attr("else_branch").name]
        else:
            names = [b.name for b in op.get_attr("branches")]
        bodies = [_body_graph(graph, n) for n in names]
        if any(b is None for b in bodies):
            return False
        predicate = op.inputs[0]
        args = list(op.inputs)[1:]
        merged = [flat.add(op, BRANCH, f"{base}output_{j}") for j in range(len(op.outputs))]
        for k, body in enumerate(bodies):
            ins, outs, trainable = self._inline(body, f"{base}branch_{k}/")
            for node, tensor in zip(ins, args):
                pending.append((node, tensor))
            for j, node in enumerate(outs[: len(merged)]):
                flat.inputs[merged[j]].append((node, trainable[j]))
        for j, node in enumerate(merged):
            pending.append((node, predicate))
            by_output[(id(op), j)] = node
        return True

    def _inline(self, body: Any, prefix: str):
        ins, outs, trainable = self.add_graph(body, prefix)
        for n in ins:
            self.flat.types[n] = LINK
        return ins, outs, trainable


def _body_graph(graph: Any, name: str) -> Any:
    """The FuncGraph of function `name`, searched from `graph` outwards."""
    g = graph
    while g is not None:
        fn = private.library_function(g, name)
        if fn is not None:
            body = getattr(fn, "graph", None)
            if body is not None:
                return body
            definition = getattr(fn, "definition", None)
            if definition is None:
                return None
            return private.function_def_to_graph(definition)
        g = getattr(g, "outer_graph", None)
    return None
