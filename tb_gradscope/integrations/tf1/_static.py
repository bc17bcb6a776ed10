"""The FlowGraph of a TF1 graph, from `tb_gradscope.analysis`.

The analysis itself lives in `analysis/`; this only adapts the TF1
recorder's losses, variables and train ops to its call, and turns a failure
into a warning (the numeric records are still written without it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope.core.warn import warn_once
from tb_gradscope.format import FlowGraph
from tb_gradscope.record._losses import StartPoint
from tb_gradscope.scopes import ScopeLayout


def static_flowgraph(
    graph: tf.Graph,
    starts: Mapping[str, tuple[tf.Tensor, Any]],
    variables: Sequence[tf.Variable],
    layout: ScopeLayout,
    train_ops: Mapping[str, tf.Operation | None],
) -> FlowGraph | None:
    """The FlowGraph of `graph`, or None (with a warning) when analysis fails."""
    try:
        from tb_gradscope.analysis import analyze_graph
    except ImportError as e:
        warn_once(
            ("tf1_no_analysis",),
            f"tb_gradscope: static analysis unavailable ({e}); the FlowGraph "
            "(blocked edges, source lines) is not written, gradient tables are.",
        )
        return None
    try:
        return analyze_graph(
            graph,
            {
                name: tensor if grad_ys is None else StartPoint(tensor, grad_ys)
                for name, (tensor, grad_ys) in starts.items()
            },
            list(zip(variables, layout.variable_leaf)),
            scopes=layout.scopes,
            train_ops={k: v for k, v in train_ops.items() if v is not None},
        )
    except Exception as e:  # noqa: BLE001 - analysis is best effort here
        warn_once(
            ("tf1_analysis_failed", id(graph)),
            f"tb_gradscope: static analysis of the TF1 graph failed "
            f"({type(e).__name__}: {e}); the FlowGraph is not written, gradient "
            "tables are.",
        )
        return None
