"""Flow contracts in your own test suite: trace a step, assert where gradient may flow.

Example (pytest):

    from tb_gradscope import testing

    def test_actor_loss_never_trains_the_critic():
        def losses(s, a, ret):
            logits, value = model(s)
            advantage = tf.stop_gradient(ret - value[:, 0])
            return {"actor": ..., "critic": ...}

        flow = testing.trace_flow(losses, s, a, ret, models={"ac": model})
        testing.assert_never(flow, "actor", "ac/critic_head")
        testing.assert_blocked(flow, "actor", "ac/critic_head")
        testing.assert_only(flow, "critic", ["ac/trunk", "ac/critic_head"])

A broken contract raises `FlowContractError` (an AssertionError) naming the
rule, the loss, the scope, its flow state and the missing cut (the scope-graph
edge where a `tf.stop_gradient` is missing). Checks run on the static FlowGraph,
so they need no training and no data beyond example inputs. Tensorflow is
imported only by `trace_flow`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib


class FlowContractError(AssertionError):
    """A flow rule broken by a traced step; `events` holds the violations."""

    def __init__(self, message: str, events: Sequence[fmt.Event]):
        super().__init__(message)
        self.events = list(events)


def trace_flow(
    fn: Callable[..., Any],
    *example_args: Any,
    models: Any = None,
    variables: Sequence[Any] | None = None,
    losses: Sequence[str] | None = None,
) -> fmt.FlowGraph:
    """Traces `fn(*example_args)` and returns its static FlowGraph.

    Args:
      fn: returns {loss name: scalar tensor} (or one scalar, named "loss");
        it may also apply an optimizer, which tells `updates` from `ignored`.
      example_args: tensors (or tf.TensorSpec) to trace with.
      models: {root: model}, a list of models or one model, named the way the
        Recorder names them (`ac/critic_head` for layer `critic_head` of a
        model given as `{"ac": model}`).
      variables: further variables to scope by their own names.
      losses: the loss names to analyse (default: all returned).
    """
    from tb_gradscope import _naming as naming
    from tb_gradscope.analysis import analyze_function

    roots = naming.model_roots(models)
    named = [pair for root, model in roots for pair in naming.model_variables(root, model)]
    if variables is not None:
        named += naming.name_variables(list(variables), roots)
    if not named:
        return analyze_function(fn, *example_args, losses=losses)
    layout = naming.build_variable_layout(named)
    return analyze_function(
        fn,
        *example_args,
        losses=losses,
        variable_scopes=layout.variable_scopes(),
        scopes=list(layout.layout.scopes),
    )


def check_flow(flow: fmt.FlowGraph, rules: Iterable[rules_lib.Rule | str]) -> list[fmt.Event]:
    """The violations of `rules` (Rule objects or strings like "never(td, target/*)")."""
    parsed = [rules_lib.parse_rule(r) if isinstance(r, str) else r for r in rules]
    return rules_lib.check_flowgraph(parsed, flow)


def assert_rules(flow: fmt.FlowGraph, rules: Iterable[rules_lib.Rule | str]) -> None:
    """Raises FlowContractError if any of `rules` is broken by `flow`."""
    events = check_flow(flow, rules)
    if events:
        raise FlowContractError(describe(flow, events), events)


def assert_flow(
    fn: Callable[..., Any],
    *example_args: Any,
    rules: Iterable[rules_lib.Rule | str],
    models: Any = None,
    variables: Sequence[Any] | None = None,
) -> fmt.FlowGraph:
    """`trace_flow` then `assert_rules` in one call; returns the FlowGraph."""
    flow = trace_flow(fn, *example_args, models=models, variables=variables)
    assert_rules(flow, rules)
    return flow


def assert_never(flow: fmt.FlowGraph, loss: str, scope: str) -> None:
    """No gradient of `loss` reaches a scope matching `scope`."""
    assert_rules(flow, [rules_lib.Never(loss, scope)])


def assert_only(flow: fmt.FlowGraph, loss: str, scopes: Sequence[str] | str) -> None:
    """Gradient of `loss` reaches only scopes matching `scopes`."""
    assert_rules(flow, [rules_lib.only(loss, scopes)])


def assert_blocked(flow: fmt.FlowGraph, loss: str, scope: str) -> None:
    """`loss` depends on `scope` but every gradient path from it is cut."""
    assert_rules(flow, [rules_lib.Blocked(loss, scope)])


def assert_updates(flow: fmt.FlowGraph, loss: str, scopes: Sequence[str] | str) -> None:
    """`loss` updates every scope matching `scopes`: its gradient arrives and an
    optimizer step fed by it writes the scope (a part that should train and
    never does fails here)."""
    assert_rules(flow, [rules_lib.updates(loss, scopes)])


def describe(flow: fmt.FlowGraph, events: Sequence[fmt.Event]) -> str:
    """A readable failure message: each violation, its evidence, and the loss's flow states."""
    lines = [f"{len(events)} flow contract(s) broken:"]
    for event in events:
        lines.append(f"- {event.name}: {event.message}")
        cut = event.evidence.get("missing_cut")
        if cut:
            lines.append(
                f"    missing cut: {cut[0]} -> {cut[1]} (no tf.stop_gradient on this edge)"
            )
        path = event.evidence.get("path")
        if path and len(path) > 2:
            lines.append(f"    gradient path: {' -> '.join(path)}")
        row = flow.cells.get(event.loss)
        if row:
            states = ", ".join(f"{s}={st}" for s, st in row.items())
            lines.append(f"    flow states of '{event.loss}': {states}")
        cuts = [e for e in flow.blocked_edges if e.loss == event.loss]
        for edge in cuts:
            where = f" at {edge.source.file}:{edge.source.line}" if edge.source else ""
            lines.append(
                f"    existing cut: {edge.producer_scope} -> {edge.consumer_scope} "
                f"({edge.op_type}){where}"
            )
    return "\n".join(lines)
