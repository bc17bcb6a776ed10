"""`analyze_function`: trace a Python step or loss function, then analyse it.

The function returns its named losses as a dict of scalar tensors; an entry
may instead be a start point `{"tensor": t, "output_gradients": g}` (a
gradient started from `t` with explicit output gradients, DQN 3.0 style).
When the function cannot be traced the error says what the eager fallback
loses: without a graph, "blocked" cannot be told from "independent".
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope.analysis._core import analyze_graph
from tb_gradscope.analysis._inputs import AnalysisError
from tb_gradscope.format.flowgraph import FlowGraph
from tb_gradscope.scopes import leaf_scope

UNTRACED_MESSAGE = (
    "the training step could not be traced into a graph, so gradscope only sees "
    "tape.gradient results: a scope without gradient is shown as 'independent' even "
    "when its path is cut (stop_gradient, a non-differentiable op, an integer edge), "
    "and no blocked edges, source lines or scope graph are available"
)


def untraced_message(fn: Any, error: BaseException) -> str:
    """The warning for an eager-only step: what failed and what the user loses."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
    return f"{name}: {type(error).__name__}: {error}. {UNTRACED_MESSAGE}"


@dataclasses.dataclass(frozen=True)
class _StartPoint:
    tensor: Any
    output_gradients: Any


def analyze_function(
    fn: Callable[..., Any],
    *example_args: Any,
    losses: Sequence[str] | None = None,
    variable_scopes: Sequence[tuple[Any, str]] | None = None,
    scopes: Sequence[str] | None = None,
) -> FlowGraph:
    """Traces `fn(*example_args)` with tf.function and analyses the graph.

    Example:
      def step(x, y):
          return {"mse": tf.reduce_mean((model(x) - y) ** 2)}
      fg = analyze_function(step, x, y, variable_scopes=[(v, "net") for v in model.variables])

    Args:
      fn: returns a dict of loss name -> scalar tensor (or start point dict),
        or one scalar tensor (named "loss"). A tf.function is used as is.
      example_args: arguments (or tf.TensorSpecs) to trace with.
      losses: the names to analyse (default: every returned loss).
      variable_scopes: (variable, leaf scope) pairs; default: every variable
        the traced graph uses, scoped by `tb_gradscope.scopes.leaf_scope`.
      scopes: the full ordered scope list (default: the tree over the leaves).

    Raises:
      AnalysisError: tracing failed (the message says what an eager fallback
        loses), or the returned losses are not as described.
    """
    traced = fn if hasattr(fn, "get_concrete_function") else tf.function(fn)
    try:
        concrete = traced.get_concrete_function(*example_args)
    except Exception as e:  # noqa: BLE001 - any tracing failure gets the same advice
        raise AnalysisError(untraced_message(fn, e)) from e
    named = _named_losses(concrete.structured_outputs)
    if losses is not None:
        unknown = [n for n in losses if n not in named]
        if unknown:
            raise AnalysisError(
                f"losses {unknown} are not returned by the function; it returns {sorted(named)}"
            )
        named = {n: named[n] for n in losses}
    if variable_scopes is None:
        variable_scopes = [(v, leaf_scope(v.name)) for v in concrete.graph.variables]
    return analyze_graph(concrete.graph, named, variable_scopes, scopes=scopes)


def _named_losses(outputs: Any) -> dict[str, Any]:
    if isinstance(outputs, tf.Tensor):
        return {"loss": outputs}
    if not isinstance(outputs, Mapping) or not outputs:
        raise AnalysisError(
            f"the function returned {type(outputs).__name__}; return a dict of loss "
            "name -> scalar tensor, e.g. {'td': loss}"
        )
    named = {}
    for name, value in outputs.items():
        if isinstance(value, Mapping) and set(value) == {"tensor", "output_gradients"}:
            value = _StartPoint(value["tensor"], value["output_gradients"])
        named[str(name)] = value
    return named
