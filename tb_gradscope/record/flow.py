"""The seam to static analysis: a traced step's graph -> FlowGraph, or a warning.

`tb_gradscope.analysis.analyze_graph(graph, losses, variable_scopes)` is looked
up when a step is traced, so the recorder works (without a FlowGraph) where the
analysis is absent. Analysis never stops recording or training: any failure is
one warning.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Mapping, Sequence

from tb_gradscope.format.flowgraph import FlowGraph
from tb_gradscope.record.warn import warn_once


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
) -> FlowGraph | None:
    """Runs the static analysis on a traced step; None (after one warning) on failure.

    `losses` maps each loss name to its scalar tensor, or to a StartPoint
    (`.tensor`, `.output_gradients`) for a gradient start point. `scopes` is
    the recorder's scope list, so FlowGraph cells and table rows agree.
    """
    analyzer = find_analyzer()
    if analyzer is None:
        return None
    try:
        result = analyzer(graph, dict(losses), list(variable_scopes), scopes=list(scopes))
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
