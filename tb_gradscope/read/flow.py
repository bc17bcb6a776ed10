"""Who updates and who reaches each scope over a run: the facts leak detectors share.

Built once per diagnosis from a `read.runs.RunLogs` and the run's target
scopes: per loss, the variable-holding scopes its gradient updates and reaches
at each examined step (the tab's flow-state rule), the scopes it alone updates
(targets are nobody's own), and paths through the FlowGraph's scope graph.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.format.flowgraph import NODE_SCOPE

if TYPE_CHECKING:
    from tb_gradscope.read.runs import RunLogs

LOSS_PREFIX = "loss:"
REACHED = (fmt.UPDATES, fmt.IGNORED)


class Flow:
    """Per-loss updated and reached scopes of one run (variable holders only)."""

    def __init__(self, run: RunLogs, targets: Iterable[str] = ()):
        self.run = run
        self.targets = list(targets)
        self.graph = run.flowgraph
        self.holders = run.holders
        self.losses = run.losses
        self.optimizer = run.optimizers
        self.updated: dict[str, dict[str, list[int]]] = {}
        self.reached: dict[str, dict[str, list[int]]] = {}
        for loss in self.losses:
            self.updated[loss], self.reached[loss] = {}, {}
            for scope in self.holders:
                states = run.states(loss, scope)
                up = [s for s, st in states.items() if st == fmt.UPDATES]
                reach = [s for s, st in states.items() if st in REACHED]
                if up:
                    self.updated[loss][scope] = up
                if reach:
                    self.reached[loss][scope] = reach
        self._own: dict[str, set[str]] = {}

    def owners(self, scope: str) -> list[str]:
        """Losses that update `scope`, in loss order."""
        return [loss for loss in self.losses if scope in self.updated[loss]]

    def own(self, loss: str) -> set[str]:
        """Scopes `loss` updates and no other loss does (targets are nobody's own)."""
        if loss not in self._own:
            self._own[loss] = {
                s
                for s in self.updated[loss]
                if self.owners(s) == [loss] and not any(within(s, t) for t in self.targets)
            }
        return self._own[loss]

    def feeds(self, sources: set[str], scopes: Iterable[str]) -> str | None:
        """A scope of `sources` whose output reaches one of `scopes` in the
        scope graph: one with an edge straight into them if any (the actor's
        output layer that its critic reads, not the layers before it)."""
        if self.graph is None:
            return None
        targets = set(scopes)
        reaching = [s for s in sorted(sources) if targets & downstream(self.graph, s)]
        direct = {e.src for e in self.graph.edges if e.dst in targets}
        return next((s for s in reaching if s in direct), reaching[0] if reaching else None)

    def enters_aside(self, loss: str, scope: str) -> bool:
        """Whether `scope`'s output reaches the loss without passing through a
        scope the loss updates (single numbers excepted: a learned coefficient
        scales a value, it does not compute it), nor through one its own
        scopes feed (the critic a DDPG actor differentiates through: a tower
        of it that reads the state joins the actor's path there), nor through
        another loss's scope the loss reaches without updating it (a value
        head its optimizer leaves to the critic's: the value enters there, and
        the trunk under it is the value's input, not a second entry), along
        edges open for it. A scope not known to be a single number is not
        passed through, so an unknown one never adds a finding."""
        if self.graph is None:
            return False
        judged = set()
        for source in self.own(loss):
            judged |= downstream(self.graph, source, open_for=loss)
        entries = {
            s
            for s in self.reached[loss]
            if s != scope and s not in self.updated[loss] and self.owners(s)
        }
        passable = {
            n.id
            for n in self.graph.nodes
            if n.kind == NODE_SCOPE
            and n.id not in judged
            and n.id not in entries
            and (n.id not in self.updated[loss] or self.run.is_scalar(n.id) is True)
        }
        return LOSS_PREFIX + loss in downstream(self.graph, scope, open_for=loss, through=passable)

    def edge_into(self, loss: str, scope: str) -> str:
        """`src -> dst`: where the gradient path of `loss` leaves `scope`."""
        if self.graph is None:
            return ""
        target = LOSS_PREFIX + loss
        for e in sorted(self.graph.edges, key=lambda e: (e.dst != target, e.src, e.dst)):
            if loss in e.blocked_for or not within(e.src, scope) or within(e.dst, scope):
                continue
            if e.dst == target or target in downstream(self.graph, e.dst, open_for=loss):
                return f"{e.src} -> {e.dst}"
        return ""

    def norms(self, loss: str, scope: str, steps: list[int]) -> dict[str, Any]:
        """The gradient L2 norm of (loss, scope) over `steps`: median and max."""
        values = [row["l2"] for s in steps if (row := self.run.grad(loss, scope, s)) is not None]
        if not values:
            return {}
        return {"grad_l2_median": statistics.median(values), "grad_l2_max": max(values)}


def within(scope: str, root: str) -> bool:
    return scope == root or scope.startswith(root + scopes_lib.SEPARATOR)


def cover(flagged: Iterable[str], holders: Sequence[str], also: Iterable[str] = ()) -> list[str]:
    """The fewest scopes naming the `flagged` holders: each flagged holder
    climbs to its highest ancestor all of whose holders are flagged (or in
    `also`: holders that may be named with them without being flagged)."""
    chosen = set(flagged)
    allowed = chosen | set(also)
    tops = []
    for scope in scopes_lib.tree_order(chosen):
        top = scope
        for ancestor in reversed(scopes_lib.ancestors(scope)[:-1]):
            under = [h for h in holders if within(h, ancestor)]
            if under and all(h in allowed for h in under):
                top = ancestor
            else:
                break
        if not any(within(top, t) for t in tops):
            tops = [t for t in tops if not within(t, top)] + [top]
    return scopes_lib.tree_order(tops)


def downstream(
    graph: fmt.FlowGraph, start: str, open_for: str | None = None, through: set[str] | None = None
) -> set[str]:
    """Scope-graph nodes reachable from `start` along its edges.

    `open_for`: only edges not cut for that loss. `through`: nodes a path may
    pass through (None: any); `start` is always left."""
    edges: dict[str, list[str]] = {}
    for e in graph.edges:
        if open_for is None or open_for not in e.blocked_for:
            edges.setdefault(e.src, []).append(e.dst)
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node != start and through is not None and node not in through:
            continue
        for nxt in edges.get(node, []):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    seen.discard(start)
    return seen
