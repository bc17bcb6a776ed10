"""One run's records as the diagnosis reads them, whoever loaded them.

The command line and the plugin both decode a run into one `read.runs.RunLogs`
and convert it with `read.runs.run_records`, so `tb-gradscope doctor` and the
tab's Findings panel diagnose the same data the same way. `RunRecords` also
answers the questions every finding asks: the flow state of a cell at each
recorded step, which scopes hold variables, the scope graph's paths. Never
imports tensorflow.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.format.flowgraph import NODE_SCOPE
from tb_gradscope.format.metadata import recorded_stat
from tb_gradscope.read.flowstate import cell_state

Row = Mapping[str, float]
LOSS_PREFIX = "loss:"
# A long run is diagnosed on this many of its recorded steps, spread evenly,
# its last KEEP_LAST_STEPS always among them (see `thin`).
MAX_EXAMINED_STEPS = 1000
KEEP_LAST_STEPS = 10


def flowgraph_in_force(
    flowgraphs: Sequence[tuple[int, fmt.FlowGraph]], step: int
) -> fmt.FlowGraph | None:
    """The FlowGraph in force at `step` among (step written, FlowGraph) by step:
    the latest written at or before it (or the first one, for steps recorded
    before any trace was written)."""
    chosen = None
    for written, graph in flowgraphs:
        if written <= step or chosen is None:
            chosen = graph
    return chosen


@dataclasses.dataclass(frozen=True)
class PairSeries:
    """One target/online pair's DRIFT series: its record attrs, steps and
    tables, and its online network's single optimizer steps recorded up to
    the first of them (step -> norm, `read.online_path.online_moves`)."""

    name: str
    attrs: Mapping
    steps: Sequence[int]
    tables: Sequence[fmt.Table]
    online_moves: Mapping[int, float] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass
class RunRecords:
    """What one run recorded, in plain containers.

    Attributes:
      run: the run name.
      flowgraphs: (step written, FlowGraph), by step.
      grads: step -> loss -> scope -> grad_stats row ({column: value}).
      conflict: (loss a, loss b) -> [(step, {scope: cosine})], by step.
      pairs: the DRIFT series of every pair.
      events: events the run recorded (violations are ignored: doctor needs no rules).
    """

    run: str
    flowgraphs: list[tuple[int, fmt.FlowGraph]] = dataclasses.field(default_factory=list)
    grads: dict[int, dict[str, dict[str, Row]]] = dataclasses.field(default_factory=dict)
    conflict: dict[tuple[str, str], list[tuple[int, dict[str, float]]]] = dataclasses.field(
        default_factory=dict
    )
    pairs: list[PairSeries] = dataclasses.field(default_factory=list)
    events: list[fmt.Event] = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.steps = sorted(self.grads)
        self._losses: list[str] | None = None
        self._loss_steps: dict[str, list[int]] = {}
        self._graph_at: dict[int, fmt.FlowGraph | None] = {}
        self._states: dict[tuple[str, str], dict[int, str]] = {}

    @property
    def flowgraph(self) -> fmt.FlowGraph | None:
        """The latest FlowGraph (the one holding every loss a run traced)."""
        return self.flowgraphs[-1][1] if self.flowgraphs else None

    def flowgraph_at(self, step: int) -> fmt.FlowGraph | None:
        """The FlowGraph in force at `step` (`flowgraph_in_force`)."""
        return flowgraph_in_force(self.flowgraphs, step)

    @property
    def losses(self) -> list[str]:
        """Every loss, in the order the FlowGraph lists them, then the rest."""
        if self._losses is None:
            order = [loss.name for loss in self.flowgraph.losses] if self.flowgraph else []
            for step in self.steps:
                order += [loss for loss in self.grads[step] if loss not in order]
            self._losses = order
        return self._losses

    def loss_steps(self, loss: str) -> list[int]:
        """The recorded steps that hold `loss` (a TD3 actor: every other one)."""
        if loss not in self._loss_steps:
            self._loss_steps[loss] = [s for s in self.steps if loss in self.grads[s]]
        return self._loss_steps[loss]

    def state(self, loss: str, scope: str, step: int) -> str:
        """The cell's flow state at a recorded step, by the tab's own rule."""
        if step not in self._graph_at:
            self._graph_at[step] = self.flowgraph_at(step)
        graph = self._graph_at[step]
        static = graph.cells.get(loss, {}).get(scope) if graph else None
        return cell_state(self.grads[step].get(loss, {}).get(scope), static)

    def states(self, loss: str, scope: str) -> dict[int, str]:
        """step -> flow state at every recorded step of `loss`; the
        FlowGraph's static state (at step -1) when nothing was recorded."""
        key = (loss, scope)
        if key not in self._states:
            steps = self.loss_steps(loss)
            if steps:
                self._states[key] = {s: self.state(loss, scope, s) for s in steps}
            else:
                graph = self.flowgraph
                static = graph.cells.get(loss, {}).get(scope) if graph else None
                self._states[key] = {-1: static} if static else {}
        return self._states[key]

    def grad(self, loss: str, scope: str, step: int) -> Row | None:
        row = self.grads.get(step, {}).get(loss, {}).get(scope)
        return row if row is not None and _positive(row.get("grad_vars")) else None

    def scopes(self) -> list[str]:
        """Every scope of the run, in tree order."""
        found: set[str] = set()
        for _, graph in self.flowgraphs:
            found.update(graph.scopes)
        for per_loss in self.grads.values():
            for rows in per_loss.values():
                found.update(rows)
        return scopes_lib.tree_order(found)

    def holders(self) -> list[str]:
        """Scopes that hold variables themselves: the scope graph's scope
        nodes, else the leaves of the scope tree (a run without FlowGraph)."""
        graph = self.flowgraph
        if graph is not None and graph.nodes:
            return scopes_lib.tree_order(n.id for n in graph.nodes if n.kind == NODE_SCOPE)
        every = self.scopes()
        parents = {p for s in every for p in scopes_lib.ancestors(s)[:-1]}
        return [s for s in every if s not in parents]

    def is_scalar(self, scope: str) -> bool | None:
        """Whether the scope holds a single number (a temperature, a learned
        loss weight): every gradient it received that can tell (`scalar_row`)
        says so. False when one says not, or when none was received; None
        when gradients were received but none could tell (the run did not
        record `max_abs`): callers then pick the answer that finds less."""
        received, told = False, False
        for step in self.steps:
            for rows in self.grads[step].values():
                row = rows.get(scope)
                if row is None or not _positive(row.get("grad_vars")):
                    continue
                received = True
                says = scalar_row(row)
                if says is False:
                    return False
                told = told or says is True
        return True if told else (None if received else False)


def scalar_row(row: Row) -> bool | None:
    """What one received gradient row says about its scope holding a single
    number: False for several variables, or a zero fraction only several
    elements give; True when its one variable's L2 norm equals its largest
    element; None when `max_abs` was not recorded (no evidence either way)."""
    if row["grad_vars"] != 1:
        return False
    zero_frac = recorded_stat(row, "zero_frac")
    if zero_frac is not None and 0.0 < zero_frac < 1.0:
        return False
    top = recorded_stat(row, "max_abs")
    if top is None:
        return None
    return math.isclose(row.get("l2", math.nan), top, rel_tol=1e-5, abs_tol=1e-12)


def thin(steps: Sequence[int]) -> list[int]:
    """The recorded steps a diagnosis reads: all of them up to
    MAX_EXAMINED_STEPS, else that many spread evenly with the last
    KEEP_LAST_STEPS kept (what persists to the end counts)."""
    steps = sorted(steps)
    if len(steps) <= MAX_EXAMINED_STEPS:
        return steps
    head, count = steps[:-KEEP_LAST_STEPS], MAX_EXAMINED_STEPS - KEEP_LAST_STEPS
    return [head[int(i * len(head) / count)] for i in range(count)] + steps[-KEEP_LAST_STEPS:]


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


def _positive(value) -> bool:
    return value is not None and math.isfinite(value) and value > 0
