"""One run's gradscope records as one Python object, for the CLI and the plugin alike.

`decode_run` turns what `read.reader.Reader` read of one run (its listing, its
table series, its blob documents) into a `RunLogs`: gradient and update tables
per step (each step decoded on first read), drift and conflict series per
name, FlowGraphs, events, the rules the run was trained with, and the table
series by record name for the tab's array views. Everything else is an
indexed accessor or a cached property of it: the FlowGraph in force at a step
(`flowgraph_in_force`, the one rule), the rows the diagnosis reads, a cell's
flow state, the derived anomalies. `read.logdir.load_logdir` (the command line)
and the plugin's cache both build it, so `tb-gradscope` and the tab conclude
from the same object.

A RunLogs is data: it imports no detector. The findings
(`read.findings.diagnose(run)`) and the violations
(`read.violations.check_run(run)`) are functions of it, kept by whoever asks
(the plugin's cache, each command), so the detectors import this module and
never the other way round. Never imports tensorflow.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.format.flowgraph import NODE_SCOPE
from tb_gradscope.format.metadata import recorded_stat
from tb_gradscope.read.anomalies import derived_anomalies
from tb_gradscope.read.evidence import blocked_cuts
from tb_gradscope.read.flowstate import cell_state
from tb_gradscope.read.online_path import online_moves
from tb_gradscope.read.reader import BlobStep, RunListing, TableSeries

# Key of the FLOWGRAPH (and an eager run's GRAD_STATS) record attrs listing the
# rules a run was trained with (compact strings, e.g. "never(td, target/*)").
RULES_ATTR = "rules"

# A long run is diagnosed on this many of its recorded steps, spread evenly,
# its last KEEP_LAST_STEPS always among them (see `thin`).
MAX_EXAMINED_STEPS = 1000
KEEP_LAST_STEPS = 10

Row = Mapping[str, float]

# (step, wall time, parsed document) of a blob kind.
Dated = tuple[int, float, Any]


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


class StepTables(Mapping):
    """step -> the tables a run's series hold at that step, each step decoded
    on first read: the tab's run and matrix routes read the steps of a long
    run without decoding them, a diagnosis the steps it examines. Series are
    taken by tag, so a step written under two scope layouts keeps the later
    tag's table. With `by_name`, a step maps to {record name: table} (the
    gradient tables of every loss), else to its one table (the update table).
    """

    def __init__(self, series: Sequence[TableSeries], by_name: bool):
        self._series = sorted(series, key=lambda s: s.record.tag)
        self._by_name = by_name
        self._steps = list(dict.fromkeys(step for s in self._series for step in s.steps.tolist()))
        self._kept = set(self._steps)
        self._decoded: dict[int, Any] = {}

    def __getitem__(self, step: int) -> Any:
        found = self._decoded.get(step)
        if found is None:
            if step not in self._kept:
                raise KeyError(step)
            tables = {}
            for series in self._series:
                i = series.index_of(step)
                if i is not None:
                    info = series.record.info
                    tables[info.name] = fmt.decode_table(info, series.values[i])
            found = tables if self._by_name else list(tables.values())[-1]
            self._decoded[step] = found
        return found

    def __contains__(self, step: object) -> bool:
        return step in self._kept

    def __iter__(self) -> Iterator[int]:
        return iter(self._steps)

    def __len__(self) -> int:
        return len(self._steps)


@dataclasses.dataclass(eq=False)
class RunLogs:
    """One run's decoded gradscope records (every kept step), and what is read off them.

    The fields are filled once (by `decode_run`, or by hand in tests); what
    is read off them is computed on first use and kept.

    Attributes:
      run: the run name.
      grads: step -> loss -> GRAD_STATS table (`StepTables` from `decode_run`).
      updates: step -> UPDATE_STATS table (likewise).
      drift, conflict: name -> [(step, table)], by step.
      flowgraphs: (step written, FlowGraph), by step.
      recorded_rules: the rules the run was trained with.
      events: the events the run recorded, by step, type and name.
      wall_times: the wall time of each of `events` (empty: unknown, 0).
      series: (kind, name) -> its table series, one per scope layout, for
        the tab's array views (`rows_at`; the series and drift routes).
      grad_records: GRAD_STATS tags listed, readable or not.
      listing_warnings, read_warnings, document_warnings: records skipped at
        listing time, steps or tags skipped at read time, FlowGraph and event
        documents that could not be parsed.
      logdir_warnings: event files the command line left out (`read.logdir`).
    """

    run: str
    grads: Mapping[int, dict[str, fmt.Table]] = dataclasses.field(default_factory=dict)
    updates: Mapping[int, fmt.Table] = dataclasses.field(default_factory=dict)
    drift: dict[str, list[tuple[int, fmt.Table]]] = dataclasses.field(default_factory=dict)
    conflict: dict[str, list[tuple[int, fmt.Table]]] = dataclasses.field(default_factory=dict)
    flowgraphs: list[tuple[int, fmt.FlowGraph]] = dataclasses.field(default_factory=list)
    recorded_rules: list[str] = dataclasses.field(default_factory=list)
    events: list[fmt.Event] = dataclasses.field(default_factory=list)
    wall_times: list[float] = dataclasses.field(default_factory=list)
    series: dict[tuple[fmt.Kind, str], list[TableSeries]] = dataclasses.field(default_factory=dict)
    grad_records: int = 0
    listing_warnings: list[str] = dataclasses.field(default_factory=list)
    read_warnings: list[str] = dataclasses.field(default_factory=list)
    document_warnings: list[str] = dataclasses.field(default_factory=list)
    logdir_warnings: list[str] = dataclasses.field(default_factory=list)
    _graph_at: dict[int, fmt.FlowGraph | None] = dataclasses.field(
        default_factory=dict, init=False, repr=False
    )
    _states: dict[tuple[str, str], dict[int, str]] = dataclasses.field(
        default_factory=dict, init=False, repr=False
    )
    _loss_steps: dict[str, list[int]] = dataclasses.field(
        default_factory=dict, init=False, repr=False
    )
    _scalar: dict[str, bool | None] = dataclasses.field(
        default_factory=dict, init=False, repr=False
    )
    _cuts: dict[int, list] = dataclasses.field(default_factory=dict, init=False, repr=False)

    # --- the run as recorded ------------------------------------------------

    @property
    def warnings(self) -> list[str]:
        """What the command line prints about reading the run: records and
        documents skipped, steps skipped at read time, events the recorder
        dropped, event files left out."""
        dropped = [
            f"run {self.run!r}: {e.message} (said at step {e.step})"
            for e in self.events
            if e.type == fmt.DROPPED
        ]
        return (
            self.listing_warnings
            + self.document_warnings
            + self.read_warnings
            + dropped
            + self.logdir_warnings
        )

    @property
    def grads_unreadable(self) -> bool:
        """The run has gradient tables, but not one step of them could be read."""
        return self.grad_records > 0 and not self.grads

    @functools.cached_property
    def steps(self) -> list[int]:
        """Steps with gradient or update tables, ascending."""
        return sorted(set(self.grads) | set(self.updates))

    @functools.cached_property
    def grad_steps(self) -> list[int]:
        """Steps with gradient tables, ascending (the tab's kept steps)."""
        return sorted(self.grads)

    @functools.cached_property
    def last_step(self) -> int:
        """The last step the run wrote anything at (0 when none)."""
        candidates = self.steps + [s for s, _ in self.flowgraphs] + [e.step for e in self.events]
        candidates += [s for series in self.drift.values() for s, _ in series]
        return max(candidates, default=0)

    @property
    def flowgraph(self) -> fmt.FlowGraph | None:
        """The latest FlowGraph (the one holding every loss a run traced)."""
        return self.flowgraphs[-1][1] if self.flowgraphs else None

    def flowgraph_at(self, step: int) -> fmt.FlowGraph | None:
        """The FlowGraph in force at `step` (`flowgraph_in_force`)."""
        if step not in self._graph_at:
            self._graph_at[step] = flowgraph_in_force(self.flowgraphs, step)
        return self._graph_at[step]

    @functools.cached_property
    def optimizers(self) -> dict[str, str]:
        """loss -> the optimizer its gradient feeds, as the FlowGraphs say (the latest wins)."""
        found = {}
        for _, graph in self.flowgraphs:
            found.update({loss.name: loss.optimizer for loss in graph.losses})
        return found

    # --- the table series, as the tab slices them ---------------------------

    def names(self, kind: fmt.Kind) -> list[str]:
        """The record names of one table kind, sorted."""
        return sorted(name for k, name in self.series if k == kind)

    def rows_at(self, kind: fmt.Kind, name: str, step: int) -> dict[str, dict[str, float]] | None:
        """{scope: {column: value}} of a record at a step, merged across
        layouts, or None when the record has no data at that step."""
        rows: dict[str, dict[str, float]] | None = None
        for series in self.series.get((kind, name), []):
            i = series.index_of(step)
            if i is None:
                continue
            rows = rows or {}
            info = series.record.info
            for scope, values in zip(info.scopes, series.values[i].tolist()):
                rows[scope] = dict(zip(info.columns, values))
        return rows

    @functools.cached_property
    def table_scopes(self) -> list[str]:
        """Every scope a table series labels, in tree order."""
        return scopes_lib.tree_order(
            s
            for group in self.series.values()
            for series in group
            for s in series.record.info.scopes
        )

    def cuts(self, graph: fmt.FlowGraph | None) -> list:
        """`read.evidence.blocked_cuts(graph)`, computed once per FlowGraph of the run."""
        if graph is None:
            return []
        found = self._cuts.get(id(graph))
        if found is None:
            found = self._cuts[id(graph)] = blocked_cuts(graph)
        return found

    # --- conclusions --------------------------------------------------------

    @functools.cached_property
    def anomalies(self) -> tuple[list[fmt.Event], list[str]]:
        """The anomalies `read.anomalies` derives from each pair's DRIFT series
        and the online network's recorded moves, minus those the run recorded
        itself; and a warning per pair whose series could not be judged."""
        return derived_anomalies(self.run, self.drift, self.events, self.updates)

    @functools.cached_property
    def timeline(self) -> list[Dated]:
        """[(step, wall time, event)] of the recorded events and the derived
        anomalies (at their drift record's wall time), by step, type and name:
        the tab's events route."""
        walls = self.wall_times or [0.0] * len(self.events)
        drift = [
            s for (kind, _), group in self.series.items() if kind == fmt.Kind.DRIFT for s in group
        ]
        wall_of: dict[int, float] = {}
        for series in sorted(drift, key=lambda s: s.record.tag):
            wall_of.update(zip(series.steps.tolist(), series.wall_times.tolist()))
        found = [(e.step, wall, e) for e, wall in zip(self.events, walls)]
        found += [(e.step, wall_of.get(e.step, 0.0), e) for e in self.anomalies[0]]
        return sorted(found, key=lambda item: (item[2].step, item[2].type, item[2].name))

    @property
    def tab_warnings(self) -> list[str]:
        """What the tab's run route lists: records skipped at listing time,
        steps skipped at read time, documents skipped, pairs not judged."""
        return (
            self.listing_warnings + self.read_warnings + self.document_warnings + self.anomalies[1]
        )

    # --- the rows the diagnosis reads ---------------------------------------

    @functools.cached_property
    def grad_rows(self) -> dict[int, dict[str, dict[str, Row]]]:
        """step -> loss -> scope -> grad_stats row ({column: value}) at the
        steps a diagnosis examines (`thin`)."""
        return {
            step: {
                loss: {s: table.row(s) for s in table.info.scopes}
                for loss, table in self.grads[step].items()
            }
            for step in thin(self.grads)
        }

    @functools.cached_property
    def examined_steps(self) -> list[int]:
        """The recorded steps a diagnosis examines, ascending."""
        return sorted(self.grad_rows)

    @functools.cached_property
    def cosines(self) -> dict[tuple[str, str], list[tuple[int, dict[str, float]]]]:
        """(loss a, loss b) -> [(step, {scope: cosine})], by step."""
        found = {}
        for name, series in self.conflict.items():
            if not series:
                continue
            losses = series[-1][1].info.attrs.get("losses")
            if not (isinstance(losses, list) and len(losses) == 2):
                losses = name.partition("|")[::2]
            found[(str(losses[0]), str(losses[1]))] = [
                (step, dict(zip(t.info.scopes, t.column("cosine").tolist()))) for step, t in series
            ]
        return found

    @functools.cached_property
    def pairs(self) -> list[PairSeries]:
        """The DRIFT series of every pair, by name."""
        return [
            PairSeries(
                name,
                series[0][1].info.attrs,
                [s for s, _ in series],
                [t for _, t in series],
                online_moves(self.updates, series[0][1].info.attrs.get("online"), series[0][0]),
            )
            for name, series in sorted(self.drift.items())
            if series
        ]

    @functools.cached_property
    def losses(self) -> list[str]:
        """Every loss, in the order the FlowGraph lists them, then the rest."""
        order = [loss.name for loss in self.flowgraph.losses] if self.flowgraph else []
        for step in self.examined_steps:
            order += [loss for loss in self.grad_rows[step] if loss not in order]
        return order

    def loss_steps(self, loss: str) -> list[int]:
        """The examined steps that hold `loss` (a TD3 actor: every other one)."""
        if loss not in self._loss_steps:
            self._loss_steps[loss] = [s for s in self.examined_steps if loss in self.grad_rows[s]]
        return self._loss_steps[loss]

    def state(self, loss: str, scope: str, step: int) -> str:
        """The cell's flow state at an examined step, by the tab's own rule."""
        graph = self.flowgraph_at(step)
        static = graph.cells.get(loss, {}).get(scope) if graph else None
        return cell_state(self.grad_rows[step].get(loss, {}).get(scope), static)

    def states(self, loss: str, scope: str) -> dict[int, str]:
        """step -> flow state at every examined step of `loss`; the
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
        """The gradient row of a cell at an examined step, None when none arrived."""
        row = self.grad_rows.get(step, {}).get(loss, {}).get(scope)
        return row if row is not None and _positive(row.get("grad_vars")) else None

    @functools.cached_property
    def scopes(self) -> list[str]:
        """Every scope of the FlowGraphs and examined rows, in tree order."""
        found: set[str] = set()
        for _, graph in self.flowgraphs:
            found.update(graph.scopes)
        for per_loss in self.grad_rows.values():
            for rows in per_loss.values():
                found.update(rows)
        return scopes_lib.tree_order(found)

    @functools.cached_property
    def holders(self) -> list[str]:
        """Scopes that hold variables themselves: the scope graph's scope
        nodes, else the leaves of the scope tree (a run without FlowGraph)."""
        graph = self.flowgraph
        if graph is not None and graph.nodes:
            return scopes_lib.tree_order(n.id for n in graph.nodes if n.kind == NODE_SCOPE)
        parents = {p for s in self.scopes for p in scopes_lib.ancestors(s)[:-1]}
        return [s for s in self.scopes if s not in parents]

    def is_scalar(self, scope: str) -> bool | None:
        """Whether the scope holds a single number (a temperature, a learned
        loss weight): every gradient it received that can tell (`scalar_row`)
        says so. False when one says not, or when none was received; None
        when gradients were received but none could tell (the run did not
        record `max_abs`): callers then pick the answer that finds less."""
        if scope not in self._scalar:
            self._scalar[scope] = self._is_scalar(scope)
        return self._scalar[scope]

    def _is_scalar(self, scope: str) -> bool | None:
        received, told = False, False
        for step in self.examined_steps:
            for rows in self.grad_rows[step].values():
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


def _positive(value) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def decode_run(
    listing: RunListing,
    tables: Mapping[str, TableSeries],
    blobs: Mapping[str, list[BlobStep]],
    read_warnings: Mapping[str, list[str]],
) -> RunLogs:
    """The run as Python objects. A step written under two scope layouts
    keeps the later tag's table; unreadable documents become warnings."""
    logs = RunLogs(listing.run, listing_warnings=list(listing.warnings))
    logs.grad_records = len(listing.of_kind(fmt.Kind.GRAD_STATS))
    logs.recorded_rules = _recorded_rules(listing)
    of_kind = {
        kind: [s for s in tables.values() if s.record.info.kind == kind] for kind in fmt.Kind
    }
    logs.grads = StepTables(of_kind[fmt.Kind.GRAD_STATS], by_name=True)
    logs.updates = StepTables(of_kind[fmt.Kind.UPDATE_STATS], by_name=False)
    for kind, named in ((fmt.Kind.DRIFT, logs.drift), (fmt.Kind.CONFLICT, logs.conflict)):
        for series in sorted(of_kind[kind], key=lambda s: s.record.tag):
            info = series.record.info
            named.setdefault(info.name, []).extend(
                (step, fmt.decode_table(info, values))
                for step, values in zip(series.steps.tolist(), series.values)
            )
    for record in sorted(listing.records.values(), key=lambda r: (len(r.tag), r.tag)):
        series = tables.get(record.tag)
        if series is not None:
            logs.series.setdefault((record.info.kind, record.info.name), []).append(series)
    graphs, graph_warnings = _documents(
        listing, blobs, fmt.Kind.FLOWGRAPH, fmt.FlowGraph.from_json, every=False
    )
    events, event_warnings = _documents(
        listing, blobs, fmt.Kind.EVENTS, fmt.Event.from_json, every=True
    )
    logs.flowgraphs = [(step, graph) for step, _, graph in graphs]
    events.sort(key=lambda item: (item[2].step, item[2].type, item[2].name))
    logs.events = [e for _, _, e in events]
    logs.wall_times = [wall for _, wall, _ in events]
    logs.document_warnings = graph_warnings + event_warnings
    for tag in sorted(read_warnings):
        logs.read_warnings.extend(read_warnings[tag])
    for named in (logs.drift, logs.conflict):
        for name in named:
            named[name].sort(key=lambda item: item[0])
    return logs


def _recorded_rules(listing: RunListing) -> list[str]:
    """The rules the run was trained with, each once: gradient tables' attrs
    by tag (an eager run writes no FlowGraph), then update tables' (a step
    that brings its own gradients writes no gradient table), then FlowGraphs'."""
    found: list[str] = []
    for kind in (fmt.Kind.GRAD_STATS, fmt.Kind.UPDATE_STATS, fmt.Kind.FLOWGRAPH):
        for record in sorted(listing.of_kind(kind), key=lambda r: r.tag):
            rules = record.info.attrs.get(RULES_ATTR, [])
            if isinstance(rules, list):
                found += [r for r in rules if isinstance(r, str) and r not in found]
    return found


def _documents(
    listing: RunListing,
    blobs: Mapping[str, list[BlobStep]],
    kind: fmt.Kind,
    parse: Callable[[Any], Any],
    every: bool,
) -> tuple[list[Dated], list[str]]:
    """[(step, wall time, document)] of a blob kind by step, and warnings.
    With `every` False only a step's last document counts (a FlowGraph
    written again at the same step replaces the earlier one)."""
    out, warnings = [], []
    for record in listing.of_kind(kind):
        for blob_step in blobs.get(record.tag, []):
            documents = blob_step.documents if every else blob_step.documents[-1:]
            for document in documents:
                try:
                    out.append((blob_step.step, blob_step.wall_time, parse(document)))
                except (fmt.FormatError, TypeError, AttributeError) as e:
                    warnings.append(
                        f"run {listing.run!r} tag {record.tag!r}: skipped a {kind.value} "
                        f"document at step {blob_step.step}: {e}"
                    )
    out.sort(key=lambda item: item[0])
    return out, warnings
