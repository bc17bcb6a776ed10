"""Turning table makers into records: written in-graph, or deferred out of XLA.

Outside XLA, all records of one call are computed and written inside one
`tf.cond` on the recorded-step predicate (`recorded_only`), kept as one
function call when it handles small tensors only: an unrecorded step then pays
one branch op for them, whatever the recording costs. Inside a
`jit_compile=True` trace summaries cannot be written: tables are computed
under a `tf.cond` and collected as `Stats`, which the user returns from the
compiled step and hands to `Recorder.write` outside it.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.format.flowgraph import FlowGraph
from tb_gradscope.format.metadata import (
    KIND_SPECS,
    Kind,
    create_summary_metadata,
    make_info,
    tag_for,
)
from tb_gradscope.format.records import encode_json
from tb_gradscope.record import _stats as stats
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._reductions import BIG
from tb_gradscope.record._writing import SummarySink


class Stats(NamedTuple):
    """Stats computed inside an XLA-compiled step, to be written outside it.

    Return it from the `jit_compile=True` function and pass it to
    `Recorder.write`. `tables` maps a record tag to its [scopes, columns] table.
    """

    step: tf.Tensor
    record: tf.Tensor
    tables: dict


def graph_key(ctx: ExecutionContext) -> int:
    """Identifies the graph being traced (0 when eager)."""
    return 0 if ctx.eager else id(tf.compat.v1.get_default_graph())


def recorded_only(record: tf.Tensor, work: Callable[[], Any], skip: Callable[[], Any]) -> Any:
    """`tf.cond(record, work, skip)`, as one function call when the branch is small.

    TF lowers a cond to switch/merge ops, and an untaken branch still costs its
    every op (dead-tensor propagation): kept as an `If` call, an unrecorded step
    pays one op however many the recorded branch holds. But TF runs a branch
    kept as a call more slowly (measured: a 1M-parameter model's recorded step
    +3-15 %), so a branch that handles a big tensor (>= `reductions.BIG`
    elements), where per-element costs dominate, is left to TF's lowering.
    A predicate known when traced (a `Recorder.function`'s recorded variant)
    builds the branch it selects and no cond.
    """
    known = tf.get_static_value(record)
    if known is not None:  # a step known recorded (or not) when traced: no branch at all
        return work() if bool(known) else skip()
    # Asked here: the drift monitor and the rules build branches of their own with it.
    ctx = ExecutionContext.current()
    if ctx.eager or ctx.xla:
        return tf.cond(record, work, skip)
    graph = tf.compat.v1.get_default_graph()
    first = len(graph.get_operations())
    out = tf.cond(record, work, skip)
    for op in graph.get_operations()[first:]:
        branch = private.cond_true_branch(op)
        if op.type in ("If", "StatelessIf") and branch is not None and not _handles_big(branch):
            private.keep_cond_as_call(op)
    return out


def _handles_big(branch: Any) -> bool:
    """Whether an op of the branch's graph outputs a tensor of at least BIG elements."""
    for op in branch.get_operations():
        for t in op.outputs:
            size = t.shape.num_elements()
            if size is not None and size >= BIG:
                return True
    return False


class Emitter:
    """Writes a recorder's records through its sink, or defers them under XLA."""

    def __init__(self, sink: SummarySink, recorder: str, every_n_steps: int):
        self.sink = sink
        self.recorder = recorder
        self.every = every_n_steps
        self.flowgraph: FlowGraph | None = None
        self.flowgraph_deferred = False  # known, but written later (an eager block's exit)
        self._flowgraph_revision = 0  # bumped when traced functions' losses are merged in
        self.flowgraph_attrs: dict = {}  # e.g. {"rules": [...]} for `tb-gradscope check`
        self._metadata: dict[str, bytes] = {}
        self.record_of: dict[str, tuple[Kind, str]] = {}  # tag -> (kind, name)
        self._deferred: dict[int, list[Stats]] = {}
        self._recorded: weakref.WeakKeyDictionary = (
            weakref.WeakKeyDictionary()
        )  # graph -> [branch outputs]
        self.deferred_made = False
        self.deferred_written = False

    def metadata(
        self, kind: Kind, name: str, scopes: Sequence[str], attrs: Mapping | None = None
    ) -> tuple[str, bytes]:
        """The tag of a record and its full serialized metadata (fixed on first use)."""
        tag = tag_for(kind, name)
        if tag not in self._metadata:
            self.record_of[tag] = (Kind(kind), name)
            if kind == Kind.GRAD_STATS and self.flowgraph_attrs:
                # Also with the loss tables: an eager loop never traced writes no
                # FlowGraph, and `tb-gradscope check` must still find its rules.
                attrs = {**self.flowgraph_attrs, **(attrs or {})}
            info = make_info(
                kind,
                name,
                scopes=scopes if KIND_SPECS[kind].is_table else (),
                attrs={"every_n_steps": self.every, "recorder": self.recorder, **(attrs or {})},
            )
            self._metadata[tag] = create_summary_metadata(info).SerializeToString()
        return tag, self._metadata[tag]

    def emit(
        self,
        kind: Kind,
        makers: Mapping[str, Callable[[], tf.Tensor]],
        scopes: Sequence[str],
        step: tf.Tensor,
        record: tf.Tensor,
        attrs: Mapping | None = None,
        *,
        ctx: ExecutionContext,
    ) -> Stats | None:
        """One table per maker: written when `record`, or deferred inside XLA.

        `attrs` are added to the records' metadata attrs.
        """
        if ctx.xla:
            shape = [len(scopes), len(KIND_SPECS[kind].columns)]
            tables = {}
            for name, make in makers.items():
                tag, _ = self.metadata(kind, name, scopes, attrs)
                tables[tag] = tf.cond(record, make, lambda: tf.zeros(shape, tf.float32))
            result = Stats(step, record, tables)
            self._deferred.setdefault(graph_key(ctx), []).append(result)
            self.deferred_made = True
            return result
        self.write_when(
            record,
            step,
            lambda: [(kind, name, scopes, attrs, make()) for name, make in makers.items()],
            ctx,
        )
        return None

    def write_when(
        self,
        record: tf.Tensor,
        step: tf.Tensor,
        tables: Callable[[], Sequence[tuple[Kind, str, Sequence[str], Mapping | None, tf.Tensor]]],
        ctx: ExecutionContext,
        snapshot: Sequence[Any] = (),
    ) -> list[tf.Tensor]:
        """At recorded steps: computes `tables()` ((kind, name, scopes, attrs,
        value) each) and writes them, and the FlowGraph if due, in one branch.

        The same branch reads the `snapshot` variables: returns their values
        (empty tensors at unrecorded steps; [] eagerly when not recording).
        """

        def work() -> list[tf.Tensor]:
            done = self.write_due(step, tables())
            return [done] + stats.snapshot(snapshot)

        def skip() -> list[tf.Tensor]:
            return [tf.constant(False)] + [tf.zeros([0], v.dtype) for v in snapshot]

        if ctx.eager:
            return work()[1:] if bool(record) else []
        out = recorded_only(record, work, skip)
        self.note_recorded(out[0], ctx)
        return list(out[1:])

    def note_recorded(self, done: tf.Tensor, ctx: ExecutionContext) -> None:
        """Keeps a recorded-step branch's output for `take_recorded` (graph mode)."""
        if not ctx.eager:
            self._recorded.setdefault(tf.compat.v1.get_default_graph(), []).append(done)

    def take_recorded(self, ctx: ExecutionContext) -> list[tf.Tensor]:
        """The recorded-step branches built so far in this graph (and forgets them).

        The optimizer step is run after them: a branch still waiting to read the
        gradients would keep the optimizer from reusing their buffers, and with
        the copy for ||delta theta|| that doubled the memory of a recorded step.
        """
        if ctx.eager:
            return []
        return self._recorded.pop(tf.compat.v1.get_default_graph(), [])

    def write_due(
        self,
        step: tf.Tensor,
        tables: Sequence[tuple[Kind, str, Sequence[str], Mapping | None, tf.Tensor]],
    ) -> tf.Tensor:
        """Writes tables ((kind, name, scopes, attrs, value) each) and the FlowGraph
        if not written yet, from inside the recorded-step branch."""
        records = []
        for kind, name, scopes, attrs, value in tables:
            tag, meta = self.metadata(kind, name, scopes, attrs)
            records.append((tag, meta, value, False))
        return self.sink.write_due(records + self._flowgraph_record(), step)

    def take_deferred(self, step: tf.Tensor, ctx: ExecutionContext) -> Stats:
        """Every Stats deferred in the graph being traced, merged into one."""
        pending = self._deferred.pop(graph_key(ctx), [])
        if not pending:
            return Stats(step, tf.constant(False), {})
        tables = {}
        for item in pending:
            tables.update(item.tables)
        return Stats(pending[0].step, pending[0].record, tables)

    def write(self, item: Stats) -> None:
        """Writes deferred Stats (outside XLA)."""
        self.deferred_written = True

        def work() -> tf.Tensor:
            records = [
                (tag, self._metadata[tag], table, False) for tag, table in item.tables.items()
            ]
            return self.sink.write_due(records + self._flowgraph_record(), item.step)

        recorded_only(item.record, work, lambda: tf.constant(False))

    def write_flowgraph(self, step: tf.Tensor, record: tf.Tensor) -> None:
        """The FlowGraph blob, at the first recorded step after it is known."""
        if self.flowgraph is not None:
            recorded_only(
                record,
                lambda: self.sink.write_due(self._flowgraph_record(), step),
                lambda: tf.constant(False),
            )

    def set_flowgraph(self, flowgraph: FlowGraph, deferred: bool = False) -> None:
        """The run's FlowGraph from now on. A replaced one (more losses merged
        in) is a new revision, written under a tag of its own (each revision is
        written once; readers take the latest written at or before a step)."""
        if self.flowgraph is not None:
            self._flowgraph_revision += 1
        self.flowgraph = flowgraph
        self.flowgraph_deferred = deferred

    def _flowgraph_record(self) -> list[tuple[str, bytes, tf.Tensor, bool]]:
        """The FlowGraph as a record for `SummarySink.write_due` (written once), if due."""
        if self.flowgraph is None or self.flowgraph_deferred:
            return []
        name = str(self._flowgraph_revision) if self._flowgraph_revision else ""
        tag, meta = self.metadata(Kind.FLOWGRAPH, name, (), self.flowgraph_attrs)
        return [(tag, meta, tf.constant([encode_json(self.flowgraph.to_json())]), True)]
