"""A run's gradscope records as Python objects, decoded one way for the CLI and the plugin.

`decode_run` turns what `read.reader.Reader` read of one run (its listing, its
table series, its blob documents) into a `RunLogs`: gradient and update tables
per step, drift and conflict series per name, FlowGraphs, events and the rules
the run was trained with. `read.logdir.load_logdir` (the command line) and the
plugin's findings and violations routes both call it, so `tb-gradscope` and
the tab conclude from the same objects. Never imports tensorflow.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from tb_gradscope import format as fmt
from tb_gradscope.read.online_path import online_moves
from tb_gradscope.read.reader import BlobStep, RunListing, TableSeries
from tb_gradscope.read.records import PairSeries, RunRecords, flowgraph_in_force, thin

# Key of the FLOWGRAPH (and an eager run's GRAD_STATS) record attrs listing the
# rules a run was trained with (compact strings, e.g. "never(td, target/*)").
RULES_ATTR = "rules"

# (step, wall time, parsed document) of a blob kind.
Dated = tuple[int, float, Any]


@dataclasses.dataclass
class RunLogs:
    """One run's decoded gradscope records (every kept step)."""

    run: str
    grads: dict[int, dict[str, fmt.Table]] = dataclasses.field(default_factory=dict)
    updates: dict[int, fmt.Table] = dataclasses.field(default_factory=dict)
    drift: dict[str, list[tuple[int, fmt.Table]]] = dataclasses.field(default_factory=dict)
    conflict: dict[str, list[tuple[int, fmt.Table]]] = dataclasses.field(default_factory=dict)
    flowgraphs: list[tuple[int, fmt.FlowGraph]] = dataclasses.field(default_factory=list)
    recorded_rules: list[str] = dataclasses.field(default_factory=list)
    events: list[fmt.Event] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)
    grad_records: int = 0  # GRAD_STATS tags listed, readable or not

    @property
    def grads_unreadable(self) -> bool:
        """The run has gradient tables, but not one step of them could be read."""
        return self.grad_records > 0 and not self.grads

    @property
    def steps(self) -> list[int]:
        """Steps with gradient or update tables, ascending."""
        return sorted(set(self.grads) | set(self.updates))

    @property
    def last_step(self) -> int:
        """The last step the run wrote anything at (0 when none)."""
        candidates = self.steps + [s for s, _ in self.flowgraphs] + [e.step for e in self.events]
        candidates += [s for series in self.drift.values() for s, _ in series]
        return max(candidates, default=0)

    def flowgraph_at(self, step: int) -> fmt.FlowGraph | None:
        """The FlowGraph in force at `step` (`read.records.flowgraph_in_force`)."""
        return flowgraph_in_force(self.flowgraphs, step)


def decode_run(
    listing: RunListing,
    tables: Mapping[str, TableSeries],
    blobs: Mapping[str, list[BlobStep]],
    read_warnings: Mapping[str, list[str]],
) -> RunLogs:
    """The run as Python objects. A step written under two scope layouts
    keeps the later tag's table; unreadable documents become warnings."""
    logs = RunLogs(listing.run, warnings=list(listing.warnings))
    logs.grad_records = len(listing.of_kind(fmt.Kind.GRAD_STATS))
    logs.recorded_rules = recorded_rules(listing)
    for tag in sorted(tables):
        _add_table_series(logs, tables[tag])
    graphs, graph_warnings = flowgraphs(listing, blobs)
    events, event_warnings = recorded_events(listing, blobs)
    logs.flowgraphs = [(step, graph) for step, _, graph in graphs]
    logs.events = sorted((e for _, _, e in events), key=lambda e: (e.step, e.type, e.name))
    logs.warnings += graph_warnings + event_warnings
    for tag in sorted(read_warnings):
        logs.warnings.extend(read_warnings[tag])
    logs.warnings += [
        f"run {logs.run!r}: {e.message} (said at step {e.step})"
        for e in logs.events
        if e.type == fmt.DROPPED
    ]
    for named in (logs.drift, logs.conflict):
        for name in named:
            named[name].sort(key=lambda item: item[0])
    return logs


def _add_table_series(logs: RunLogs, series: TableSeries) -> None:
    info = series.record.info
    for step, values in zip(series.steps.tolist(), series.values):
        table = fmt.decode_table(info, values)
        if info.kind == fmt.Kind.GRAD_STATS:
            logs.grads.setdefault(step, {})[info.name] = table
        elif info.kind == fmt.Kind.UPDATE_STATS:
            logs.updates[step] = table
        elif info.kind == fmt.Kind.DRIFT:
            logs.drift.setdefault(info.name, []).append((step, table))
        elif info.kind == fmt.Kind.CONFLICT:
            logs.conflict.setdefault(info.name, []).append((step, table))


def drift_series(tables: Iterable[TableSeries]) -> dict[str, list[tuple[int, fmt.Table]]]:
    """{pair: [(step, table)]} of the DRIFT series among `tables`, every
    layout's steps by step (as `decode_run` builds `RunLogs.drift`)."""
    found: dict[str, list[tuple[int, fmt.Table]]] = {}
    for series in sorted(tables, key=lambda s: s.record.tag):
        info = series.record.info
        if info.kind == fmt.Kind.DRIFT:
            found.setdefault(info.name, []).extend(
                (step, fmt.decode_table(info, values))
                for step, values in zip(series.steps.tolist(), series.values)
            )
    for named in found.values():
        named.sort(key=lambda item: item[0])
    return found


def update_tables(tables: Iterable[TableSeries], until: int | None = None) -> dict[int, fmt.Table]:
    """step -> UPDATE table among `tables` (a step written under two layouts
    keeps the later tag's, as `decode_run` builds `RunLogs.updates`), only
    steps up to `until` if given (never_synced reads those before a pair's
    first drift record: a long run's other steps are not decoded)."""
    found: dict[int, fmt.Table] = {}
    for series in sorted(tables, key=lambda s: s.record.tag):
        info = series.record.info
        if info.kind == fmt.Kind.UPDATE_STATS:
            found.update(
                (step, fmt.decode_table(info, values))
                for step, values in zip(series.steps.tolist(), series.values)
                if until is None or step <= until
            )
    return found


def recorded_rules(listing: RunListing) -> list[str]:
    """The rules the run was trained with, each once: gradient tables' attrs
    by tag (an eager run writes no FlowGraph), then FlowGraphs' by tag."""
    found: list[str] = []
    for kind in (fmt.Kind.GRAD_STATS, fmt.Kind.FLOWGRAPH):
        for record in sorted(listing.of_kind(kind), key=lambda r: r.tag):
            rules = record.info.attrs.get(RULES_ATTR, [])
            if isinstance(rules, list):
                found += [r for r in rules if isinstance(r, str) and r not in found]
    return found


def flowgraphs(
    listing: RunListing, blobs: Mapping[str, list[BlobStep]]
) -> tuple[list[Dated], list[str]]:
    """[(step, wall time, FlowGraph)] by step, and warnings. A FlowGraph
    written again at the same step replaces the earlier one (only a step's
    last document counts)."""
    return _documents(listing, blobs, fmt.Kind.FLOWGRAPH, fmt.FlowGraph.from_json, every=False)


def recorded_events(
    listing: RunListing, blobs: Mapping[str, list[BlobStep]]
) -> tuple[list[Dated], list[str]]:
    """[(step, wall time, Event)] of every EVENTS document, by step, and warnings."""
    return _documents(listing, blobs, fmt.Kind.EVENTS, fmt.Event.from_json, every=True)


def _documents(
    listing: RunListing,
    blobs: Mapping[str, list[BlobStep]],
    kind: fmt.Kind,
    parse: Callable[[Any], Any],
    every: bool,
) -> tuple[list[Dated], list[str]]:
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


def run_records(logs: RunLogs) -> RunRecords:
    """The run as the diagnosis (`read.findings`) reads it, a long run thinned."""
    grads = {
        step: {
            loss: {s: table.row(s) for s in table.info.scopes}
            for loss, table in logs.grads[step].items()
        }
        for step in thin(logs.grads)
    }
    conflict = {}
    for name, series in logs.conflict.items():
        if not series:
            continue
        losses = series[-1][1].info.attrs.get("losses")
        if not (isinstance(losses, list) and len(losses) == 2):
            losses = name.partition("|")[::2]
        conflict[(str(losses[0]), str(losses[1]))] = [
            (step, dict(zip(t.info.scopes, t.column("cosine").tolist()))) for step, t in series
        ]
    pairs = [
        PairSeries(
            name,
            series[0][1].info.attrs,
            [s for s, _ in series],
            [t for _, t in series],
            online_moves(logs.updates, series[0][1].info.attrs.get("online"), series[0][0]),
        )
        for name, series in sorted(logs.drift.items())
        if series
    ]
    return RunRecords(logs.run, list(logs.flowgraphs), grads, conflict, pairs, list(logs.events))
