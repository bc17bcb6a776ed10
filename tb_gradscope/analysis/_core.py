"""`analyze_graph`: a traced graph + named losses -> FlowGraph (plain data).

Steps: flatten the graph and its bodies; per loss, walk forward dependence and
gradient reachability; read what the optimizer applies from the writes in the
graph (or the TF1 train ops); fold variables into scope cells (a roll-up takes
its most flowing child: updates > ignored > blocked > independent); build the
scope graph and place every blocked edge on it; add the per-path cuts (a
cut on one of several paths into a scope the gradient still reaches).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import scopes as scopes_lib
from tb_gradscope.analysis import _applied as applied_lib
from tb_gradscope.analysis import _pathcuts as pathcuts
from tb_gradscope.analysis import _reach as reach
from tb_gradscope.analysis._flatten import FlatGraph, flatten
from tb_gradscope.analysis._gradrules import GradientRules
from tb_gradscope.analysis._inputs import (
    AnalysisError,
    handle_of,
    match_variables,
    normalize_losses,
)
from tb_gradscope.analysis._scopegraph import ScopeGraph
from tb_gradscope.analysis._source import user_source
from tb_gradscope.core import cells as cells_lib
from tb_gradscope.format.flowgraph import (
    BLOCKED,
    CAUSE_TAPE_BOUNDARY,
    INDEPENDENT,
    NODE_INPUT,
    NODE_LOSS,
    NODE_SCOPE,
    BlockedEdge,
    FlowGraph,
    GraphEdge,
    GraphNode,
    LossInfo,
    SourceLine,
)


def analyze_graph(
    graph: tf.Graph,
    losses: Mapping[str, Any] | Sequence[tuple[str, Any]],
    variable_scopes: Sequence[tuple[Any, str]],
    scopes: Sequence[str] | None = None,
    train_ops: Mapping[str, Any] | None = None,
    watched: Mapping[str, Sequence[Any]] | None = None,
) -> FlowGraph:
    """Static flow analysis of a traced step.

    Args:
      graph: a FuncGraph (`concrete_fn.graph`) or a TF1 `tf.Graph`.
      losses: loss name -> scalar tensor of `graph`, or a start point (any
        object with `.tensor` and `.output_gradients`).
      variable_scopes: (variable, leaf scope) for each model variable.
      scopes: the full ordered scope list (default: the tree over the leaves).
      train_ops: TF1: loss name -> train op (or list of ops) whose apply ops
        say what that loss's optimizer updates.
      watched: loss name -> the variables its GradientTape watched
        (`tape.watched_variables()`). A variable the tape did not watch (read
        only before the tape opened, or not trainable) gets no gradient from
        that loss: the tape boundary is a cut.

    Returns:
      A FlowGraph. `applied` is None when the graph holds no optimizer writes
      and no train ops were given; gradient-reachable scopes are then `updates`.

    Raises:
      AnalysisError: a loss not in the graph, no variables, duplicate names.
    """
    with _no_gc():
        return _analyze(graph, losses, variable_scopes, scopes, train_ops, watched or {})


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Pauses the cyclic GC: the walks allocate many small acyclic objects, and
    each collection would rescan the traced graph's (large) object heap,
    making the analysis superlinear in ops."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _analyze(graph, losses, variable_scopes, scopes, train_ops, watched) -> FlowGraph:
    specs = normalize_losses(losses, graph)
    flat = flatten(graph)
    var_nodes, var_names, missing = match_variables(flat, graph, variable_scopes)
    leaves = [scope for _, scope in variable_scopes]
    scope_list = (
        list(scopes)
        if scopes is not None
        else scopes_lib.tree_order(a for leaf in leaves for a in scopes_lib.ancestors(leaf))
    )
    warnings = []
    if missing:
        shown = ", ".join(missing[:5]) + (" ..." if len(missing) > 5 else "")
        warnings.append(
            f"{len(missing)} variable(s) are not used by the traced graph and are "
            f"independent of every loss: {shown}"
        )
    rules = GradientRules(flat)
    var_dep = reach.variable_dependent(flat, var_nodes)

    per_loss = []
    cone = bytearray(len(flat))
    for spec in specs:
        start = flat.node_of(spec.tensor)
        forward = reach.forward_cone(flat, start)
        gradient, cuts, passed = reach.gradient_walk(flat, rules, start, var_dep, var_nodes)
        per_loss.append((spec, start, forward, gradient, cuts, passed))
        cone = _or(cone, forward)
    cones = {spec.name: forward for spec, _, forward, *_ in per_loss}
    applied_vars, steps_by_loss = _applied(flat, specs, var_nodes, train_ops, cones)
    optimizer_of = _optimizer_groups(steps_by_loss)

    cells = {}
    outside_tape: dict[str, set[int]] = {}
    for spec, _, forward, gradient, *_ in per_loss:
        applied_here = applied_vars.get(spec.name, applied_vars.get(None))
        unwatched = _unwatched(watched.get(spec.name), variable_scopes, var_nodes, gradient)
        states = [INDEPENDENT] * len(var_names)
        for node, indices in var_nodes.items():
            for i in indices:
                reached = gradient[node] and i not in unwatched
                state = cells_lib.cell_state(forward[node], reached, applied_here, i)
                if (
                    cells_lib.RANK[state] > cells_lib.RANK[states[i]]
                ):  # a replicated variable: any replica
                    states[i] = state
        outside_tape[spec.name] = {
            i
            for node, indices in var_nodes.items()
            for i in indices
            if i in unwatched and forward[node]
        }
        cells[spec.name] = cells_lib.roll_up(states, leaves, scope_list)

    scope_graph, nodes, loss_ids = _scope_graph(flat, cone, var_nodes, leaves, specs, per_loss)
    blocked = _blocked_edges(flat, scope_graph, loss_ids, per_loss)
    blocked += _tape_boundary_edges(
        per_loss, outside_tape, leaves, var_names, cells, loss_ids, _called_at(flat, var_nodes)
    )
    blocked = pathcuts.with_path_cuts(flat, scope_graph, rules, per_loss, cells, loss_ids, blocked)
    edges = _graph_edges(scope_graph, blocked)
    applied_scopes = None
    if applied_vars:
        union = set().union(*applied_vars.values())
        hit = {a for i in union for a in scopes_lib.ancestors(leaves[i])}
        applied_scopes = [s for s in scope_list if s in hit]
    return FlowGraph(
        losses=[
            LossInfo(s.name, s.kind, s.tensor.name, optimizer_of.get(s.name, "")) for s in specs
        ],
        scopes=scope_list,
        cells=cells,
        blocked_edges=blocked,
        nodes=nodes,
        edges=edges,
        applied=applied_scopes,
        warnings=warnings,
        source="tf2" if hasattr(graph, "captures") else "tf1",
        trainable=_trainability(graph, variable_scopes, scope_list),
        path_cuts=True,
    )


def _trainability(graph, variable_scopes, scope_list) -> dict[str, str] | None:
    """Scope -> TRAINABLE / NOT_TRAINABLE / MIXED over the variables it holds;
    None when any variable's trainability is unknown. A TF1 graph's variables
    are trainable when in its TRAINABLE_VARIABLES collection (what `minimize`
    without var_list trains); a TF2 variable by its `trainable` attribute."""
    collected: dict[int, bool] = {}
    if not hasattr(graph, "captures"):
        keys = tf.compat.v1.GraphKeys
        collected = {id(v): False for v in graph.get_collection(keys.GLOBAL_VARIABLES)}
        collected.update({id(v): True for v in graph.get_collection(keys.TRAINABLE_VARIABLES)})
    flags = [collected.get(id(v), _attribute(v)) for v, _ in variable_scopes]
    if any(f is None for f in flags):
        return None
    return cells_lib.trainability(flags, [leaf for _, leaf in variable_scopes], scope_list)


def _attribute(variable) -> bool | None:
    flag = getattr(variable, "trainable", None)
    return flag if isinstance(flag, bool) else None


def _or(a: bytearray, b: bytearray) -> bytearray:
    """Element-wise OR of two flag arrays (one big-int operation, not a Python loop)."""
    return bytearray(
        (int.from_bytes(a, "little") | int.from_bytes(b, "little")).to_bytes(len(a), "little")
    )


def _unwatched(tape_variables, variable_scopes, var_nodes, gradient) -> set[int]:
    """Indices of the variables a loss's tape did not watch, among those its
    gradient walk reaches; empty when the tape is unknown, or when it watched
    none of them (its variables are then not the ones analysed: no evidence)."""
    if tape_variables is None:
        return set()
    ids = {id(h) for h in (handle_of(v) for v in tape_variables) if h is not None}
    reached = [i for node, indices in var_nodes.items() if gradient[node] for i in indices]
    watched = {i for i in reached if id(handle_of(variable_scopes[i][0])) in ids}
    return set(reached) - watched if watched else set()


def _called_at(flat, var_nodes):
    """variable index -> the user's source line of the first op reading it
    (where the network holding it was called), looked up on demand. No op of
    a tape says where the tape opened; the call before it is the user's line."""
    readers: dict[int, list[int]] = {}
    for node, inputs in enumerate(flat.inputs):
        for src, _ in inputs:
            readers.setdefault(src, []).append(node)
    node_of = {i: node for node, indices in var_nodes.items() for i in indices}
    found: dict[int, SourceLine | None] = {}

    def source(index: int) -> SourceLine | None:
        if index not in found:
            found[index] = next(
                (
                    line
                    for reader in readers.get(node_of.get(index, -1), [])
                    if (line := user_source(flat.ops[reader])) is not None
                ),
                None,
            )
        return found[index]

    return source


def _tape_boundary_edges(
    per_loss, outside_tape, leaves, var_names, cells, loss_ids, called_at
) -> list[BlockedEdge]:
    """One blocked edge per leaf scope a loss depends on only outside its tape
    (every variable of the leaf is blocked for the loss), at the user's line
    that called the network before the tape opened (`called_at`), if known."""
    edges = []
    for spec, *_ in per_loss:
        by_leaf: dict[str, list[str]] = {}
        first: dict[str, int] = {}
        for i in sorted(outside_tape[spec.name]):
            by_leaf.setdefault(leaves[i], []).append(var_names[i])
            first.setdefault(leaves[i], i)
        for leaf, names in by_leaf.items():
            if cells[spec.name].get(leaf) != BLOCKED:
                continue
            edges.append(
                BlockedEdge(
                    loss=spec.name,
                    producer=names[0],
                    consumer=spec.tensor.name,
                    op_name="GradientTape",
                    op_type="GradientTape",
                    cause=CAUSE_TAPE_BOUNDARY,
                    producer_scope=leaf,
                    consumer_scope=loss_ids[spec.name],
                    source=called_at(first[leaf]),
                )
            )
    return edges


def _optimizer_groups(steps_by_loss: Mapping[str, set[int]]) -> dict[str, str]:
    """Loss -> "opt<k>": losses whose optimizer write ops overlap share a label
    (one optimizer step consumes their summed gradient)."""
    names = sorted(steps_by_loss, key=lambda n: min(steps_by_loss[n], default=0))
    groups: list[tuple[set[int], list[str]]] = []
    for name in names:
        writes = steps_by_loss[name]
        if not writes:
            continue
        joined = [g for g in groups if g[0] & writes]
        merged = (
            set(writes).union(*(g[0] for g in joined)),
            [n for g in joined for n in g[1]] + [name],
        )
        groups = [g for g in groups if g not in joined] + [merged]
    groups.sort(key=lambda g: min(g[0]))
    return {name: f"opt{k}" for k, (_, members) in enumerate(groups) for name in members}


def _applied(
    flat: FlatGraph, specs, var_nodes, train_ops, cones
) -> tuple[dict[Any, set[int]], dict[str, set[int]]]:
    """(loss name (None: every loss) -> indices of variables its optimizer
    applies, loss name -> the write ops of its optimizer step).

    A TF1 train op names what its loss applies; otherwise the writes fed by
    the loss's own gradient ops; failing that, every gradient-fed write.
    """
    variables = set(var_nodes)
    writes = applied_lib.gradient_writes(flat, variables)
    result: dict[Any, set[int]] = {}
    steps: dict[str, set[int]] = {}
    if not writes and not train_ops:
        return result, steps
    result[None] = {i for targets in writes.values() for n in targets for i in var_nodes[n]}
    if writes:
        for name, seeds in applied_lib.gradient_seeds_by_loss(flat, cones).items():
            own = applied_lib.gradient_writes(flat, variables, seeds)
            result[name] = {i for targets in own.values() for n in targets for i in var_nodes[n]}
            steps[name] = set(own)
    for name, ops in (train_ops or {}).items():
        if name not in {s.name for s in specs}:
            raise AnalysisError(
                f"train_ops names loss '{name}', which is not among the losses "
                f"{[s.name for s in specs]}; key train_ops by loss name"
            )
        ops = ops if isinstance(ops, (list, tuple)) else [ops]
        starts = [
            flat.root_ops[id(getattr(o, "op", o))]
            for o in ops
            if id(getattr(o, "op", o)) in flat.root_ops
        ]
        if len(starts) != len(ops):
            raise AnalysisError(f"a train op of loss '{name}' is not in the analysed graph")
        run = applied_lib.upstream(flat, starts)
        result[name] = {
            i for w, targets in writes.items() if w in run for n in targets for i in var_nodes[n]
        }
        steps[name] = {w for w in writes if w in run}
    return result, steps


def _scope_graph(flat, cone, var_nodes, leaves, specs, per_loss):
    variable_scope = {n: leaves[idx[0]] for n, idx in var_nodes.items()}
    inputs = {
        n: "input:" + flat.names[n]
        for n in flat.root_ops.values()
        if flat.types[n] == "Placeholder"
        and n not in var_nodes
        and cone[n]
        and flat.ops[n].outputs[0].dtype != tf.resource  # other variables' handles
    }
    sg = ScopeGraph(flat, cone, variable_scope, inputs)
    loss_ids = {}
    for spec, start, *_ in per_loss:
        loss_ids[spec.name] = "loss:" + spec.name
        sg.add_loss(start, loss_ids[spec.name])
    nodes = [GraphNode(s, NODE_SCOPE, s) for s in scopes_lib.tree_order(leaves)]
    nodes += [GraphNode(i, NODE_INPUT, i.split(":", 1)[1]) for i in sorted(set(inputs.values()))]
    nodes += [GraphNode(loss_ids[s.name], NODE_LOSS, s.name) for s in specs]
    return sg, nodes, loss_ids


def _blocked_edges(flat, sg: ScopeGraph, loss_ids, per_loss) -> list[BlockedEdge]:
    loss_nodes = {start: loss_ids[spec.name] for spec, start, *_ in per_loss}
    result = []
    for spec, _, _, _, cuts, _ in per_loss:
        for cut in cuts:
            producer_side, consumer = sg.place(
                cut.producer, cut.consumer, loss_nodes, loss_ids[spec.name]
            )
            # One cut can separate several producer scopes (a stop_gradient on a
            # backup computed from two target critics and the policy): one edge each.
            scope_producers = [p for p in producer_side if not p.startswith(("input:", "loss:"))]
            source = user_source(flat.ops[cut.consumer])
            for producer_scope in scope_producers or producer_side[:1] or [""]:
                result.append(
                    BlockedEdge(
                        loss=spec.name,
                        producer=flat.names[cut.producer],
                        consumer=flat.names[cut.consumer],
                        op_name=flat.names[cut.consumer],
                        op_type=flat.types[cut.consumer],
                        cause=cut.cause,
                        producer_scope=producer_scope,
                        consumer_scope=consumer,
                        source=source,
                    )
                )
    return result


def _graph_edges(sg: ScopeGraph, blocked: Sequence[BlockedEdge]) -> list[GraphEdge]:
    counts = dict(sg.edges)
    blocked_for: dict[tuple[str, str], set[str]] = {}
    for edge in blocked:
        if not edge.producer_scope or not edge.consumer_scope:
            continue
        key = (edge.producer_scope, edge.consumer_scope)
        counts.setdefault(key, 1)
        blocked_for.setdefault(key, set()).add(edge.loss)
    return [
        GraphEdge(src, dst, n, tuple(sorted(blocked_for.get((src, dst), ()))))
        for (src, dst), n in sorted(counts.items())
    ]
