"""Where a run's measured gradients contradict its FlowGraph, and the measurement wins.

The FlowGraph says what the traced step *can* do; the gradient tables say what
the step that ran *did*. They disagree when the function traced is not the one
run (`rec.analyze` of a copy of the loss, a step retraced differently): a loss
measurably sends gradient into a scope the FlowGraph calls `blocked` or
`independent`. The flow state already follows the measurement (a gradient that
arrived is `updates`, `read.flowstate`); this finding says so, since every
conclusion drawn from the FlowGraph's cuts and paths is then in doubt:

- flowgraph_contradicted: a (loss, scope) cell the FlowGraph in force calls
  blocked or independent received a non-zero gradient of that loss at a
  recorded step. A leak when an optimizer step writes the scope (the
  FlowGraph's `applied`), else a hazard.

Never imports tensorflow.
"""

from __future__ import annotations

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.read import finding as F
from tb_gradscope.read.finding import Finding
from tb_gradscope.read.flow import Flow, cover, within

CONTRADICTED = (fmt.BLOCKED, fmt.INDEPENDENT)


def contradicted(flow: Flow) -> list[Finding]:
    """Cells the FlowGraph calls cut or unrelated that a measured gradient reached."""
    run = flow.run
    found = []
    for loss in flow.losses:
        seen: dict[str, list[int]] = {}
        static: dict[str, str] = {}
        for step in run.loss_steps(loss):
            graph = run.flowgraph_at(step)
            if graph is None:
                continue
            for scope in flow.holders:
                state = graph.cells.get(loss, {}).get(scope)
                if state in CONTRADICTED and run.grad(loss, scope, step) is not None:
                    row = run.grad(loss, scope, step)
                    if row.get("l2") != 0:
                        seen.setdefault(scope, []).append(step)
                        static[scope] = state
        for scope in cover(seen, flow.holders):
            inside = [h for h in seen if within(h, scope)]
            steps = sorted({s for h in inside for s in seen[h]})
            states = sorted({static[h] for h in inside})
            applied = set(flow.graph.applied or []) if flow.graph is not None else set()
            written = any(h in applied for h in inside)
            rule = (
                rules_lib.Blocked(loss, f"{scope}/*")
                if states == [fmt.BLOCKED]
                else rules_lib.Never(loss, f"{scope}/*")
            )
            found.append(
                Finding(
                    kind=F.FLOWGRAPH_CONTRADICTED,
                    what=f"the FlowGraph says loss '{loss}' sends no gradient into '{scope}' (state "
                    f"{'/'.join(states)}), but a gradient of '{loss}' was measured there at "
                    f"{len(steps)} of {len(run.loss_steps(loss))} recorded steps: the step that ran is not "
                    "the one analyzed, and the measurement wins",
                    loss=loss,
                    scope=scope,
                    edge=flow.edge_into(loss, scope),
                    evidence={
                        "flowgraph_state": states,
                        "updates": written,
                        "steps_seen": len(steps),
                        "loss_recorded_steps": len(run.loss_steps(loss)),
                        **flow.norms(loss, scope, steps),
                    },
                    why=f"the FlowGraph was traced from code where '{scope}' is cut off '{loss}' (or not "
                    "read at all), the loop that trains runs code where it is not: every cut, path and "
                    f"rule read off that FlowGraph is wrong for '{loss}', and '{loss}' trains '{scope}'"
                    if written
                    else f"the FlowGraph was traced from code where '{scope}' is cut off '{loss}', the loop "
                    f"runs code where '{loss}''s gradient reaches it",
                    fix=f"find where '{loss}' reads '{scope}' in the step that runs and cut it as the "
                    "analyzed code does (tf.stop_gradient), or, if the analyzed code is the wrong one, "
                    "trace the step itself: rec.analyze(step_fn, *example_args) with the loop's own "
                    "step function",
                    rule=str(rule),
                    severity=F.LEAK if written else F.HAZARD,
                    first_step=steps[0],
                    last_step=steps[-1],
                    steps=len(steps),
                )
            )
    return found
