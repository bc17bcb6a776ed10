"""The seam to static analysis: a traced step's graph -> FlowGraph, or a warning.

`tb_gradscope.analysis.analyze_graph(graph, losses, variable_scopes)` is looked
up when a step is traced, so the recorder works (without a FlowGraph) where the
analysis is absent. Analysis never stops recording or training: any failure is
one warning. A step traced as several functions gives one FlowGraph each,
merged into the run's (`merge`).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tb_gradscope.core.warn import warn_once
from tb_gradscope.format.flowgraph import FlowGraph, GraphEdge


def find_analyzer() -> Callable[..., Any] | None:
    """`tb_gradscope.analysis.analyze_graph`, or None if it is not available."""
    try:
        module = importlib.import_module("tb_gradscope.analysis")
    except ImportError:
        return None
    analyzer = getattr(module, "analyze_graph", None)
    return analyzer if callable(analyzer) else None


def analyze_step(
    graph: Any,
    losses: Mapping[str, Any],
    variable_scopes: Sequence[tuple[Any, str]],
    scopes: Sequence[str],
    recorder: str,
    watched: Mapping[str, Sequence[Any]] | None = None,
) -> FlowGraph | None:
    """Runs the static analysis on a traced step; None (after one warning) on failure.

    `losses` maps each loss name to its scalar tensor, or to a StartPoint
    (`.tensor`, `.output_gradients`) for a gradient start point. `scopes` is
    the recorder's scope list, so FlowGraph cells and table rows agree.
    `watched` maps a loss to the variables its GradientTape watched.
    """
    analyzer = find_analyzer()
    if analyzer is None:
        return None
    try:
        result = analyzer(
            graph,
            dict(losses),
            list(variable_scopes),
            scopes=list(scopes),
            watched=dict(watched or {}),
        )
        if not isinstance(result, FlowGraph):
            raise TypeError(f"analyze_graph returned {type(result).__name__}, not FlowGraph")
        return result
    except Exception as e:  # analysis must never break recording or training
        warn_once(
            ("analysis_failed", recorder, type(e).__name__),
            f"Recorder '{recorder}': static analysis of the traced step failed "
            f"({type(e).__name__}: {e}); gradient stats are still recorded, but "
            "the Gradscope tab will show no flow graph for this run",
        )
        return None


def merge(known: FlowGraph, more: FlowGraph) -> FlowGraph:
    """One FlowGraph for a step traced as several functions (one per optimizer):
    `more`'s losses added to `known` (same scope list; a loss already known is
    kept as it was), the scope graphs and what each knows of trainability united."""
    new = [info for info in more.losses if info.name not in known.cells]
    names = {info.name for info in new}
    nodes = {node.id: node for node in known.nodes}
    for node in more.nodes:
        nodes.setdefault(node.id, node)
    edges = {(e.src, e.dst): e for e in known.edges}
    for e in more.edges:
        old = edges.get((e.src, e.dst))
        edges[(e.src, e.dst)] = (
            e
            if old is None
            else GraphEdge(
                e.src,
                e.dst,
                max(old.tensors, e.tensors),
                tuple(sorted(set(old.blocked_for) | set(e.blocked_for))),
            )
        )
    applied = None
    if known.applied is not None or more.applied is not None:
        hit = set(known.applied or ()) | set(more.applied or ())
        applied = [s for s in known.scopes if s in hit]
    trainable = None
    if known.trainable is not None or more.trainable is not None:
        trainable = {**(more.trainable or {}), **(known.trainable or {})}
    return FlowGraph(
        losses=list(known.losses) + new,
        scopes=list(known.scopes),
        cells={**known.cells, **{n: more.cells[n] for n in names}},
        blocked_edges=list(known.blocked_edges)
        + [e for e in more.blocked_edges if e.loss in names],
        nodes=list(nodes.values()),
        edges=[edges[k] for k in sorted(edges)],
        applied=applied,
        trainable=trainable,
        warnings=list(dict.fromkeys(known.warnings + more.warnings)),
        source=known.source,
        path_cuts=known.path_cuts and more.path_cuts,
    )


def relabel_optimizers(
    found: FlowGraph, known: FlowGraph | None, optimizers: Sequence[Any], labels: dict[int, str]
) -> FlowGraph:
    """`found`'s optimizer labels made to mean the same optimizer across the
    traced functions of one run.

    Each function's analysis numbers its own optimizer steps from "opt0", so
    two functions with two optimizers (TD3's critic and actor updates, called
    inside one eager `training_step()` block) would both say "opt0" once
    merged. A function that applies one optimizer object takes that object's
    label (`labels`: id -> label, filled as functions are analyzed), or a new
    one; a function of several optimizers keeps its own grouping under labels
    unused so far.
    """
    used = {
        info.optimizer for info in (known.losses if known is not None else ()) if info.optimizer
    }
    own = sorted({info.optimizer for info in found.losses if info.optimizer})
    mapping: dict[str, str] = {}
    if len(optimizers) == 1 and len(own) == 1:
        key = id(optimizers[0])
        if key not in labels:
            labels[key] = own[0] if own[0] not in used else _fresh(used)
        mapping[own[0]] = labels[key]
    else:
        for label in own:
            mapping[label] = label if label not in used else _fresh(used | set(mapping.values()))
            used = used | {mapping[label]}
    if all(k == v for k, v in mapping.items()):
        return found
    losses = [
        dataclasses.replace(info, optimizer=mapping.get(info.optimizer, info.optimizer))
        for info in found.losses
    ]
    return dataclasses.replace(found, losses=losses)


def _fresh(used: set[str]) -> str:
    k = 0
    while f"opt{k}" in used:
        k += 1
    return f"opt{k}"
