"""Turning the probe's ring of stats into records: tables, FlowGraph, rule violations.

Runs in Python between executions of the train function, so it writes eagerly
through a `SummarySink` (one event file per run directory, shared with a
DriftMonitor: TensorBoard's Python loader misses records of two files written
side by side in one directory).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.format import (
    KIND_SPECS,
    Kind,
    create_summary_metadata,
    encode_blobs,
    encode_table,
    make_info,
    tag_for,
)
from tb_gradscope.integrations.keras._capture import OutputLoss
from tb_gradscope.integrations.keras._step import StepProbe
from tb_gradscope.record import _loss_scale as loss_scale
from tb_gradscope.record._writing import SummarySink
from tb_gradscope.rules import RuleChecker, apply_policy
from tb_gradscope.rules.policy import LOG


class KerasRecords:
    """Writes what a StepProbe recorded, each step once, in step order.

    Args:
      sink: where records go.
      attrs: metadata attrs shared by every record (recorder, every_n_steps).
      checker: rules to check (None: no rules).
      on_violation: the user's policy, applied after violations are written.
    """

    def __init__(
        self,
        sink: SummarySink,
        attrs: dict[str, Any],
        checker: RuleChecker | None,
        on_violation: str,
    ):
        self.sink = sink
        self.attrs = attrs
        self.checker = checker
        self.on_violation = on_violation
        self.written_step = -1
        self.dirty = False  # written since the last flush
        self._flowgraph_written = False
        self.skips_written_step = -1
        self._metadata: dict[str, tuple[Any, bytes]] = {}
        self._table_writers: dict[tuple[str, ...], Any] = {}
        self._drainers: dict[tuple[Any, ...], Any] = {}

    def drain(self, probe: StepProbe, final: bool = False) -> int:
        """Writes every recorded step the ring holds that is not written yet;
        returns the probe's current step.

        Skipped batches are written once their step is over (`final`: at the
        end of training, whatever the step), as one event per step.

        Not flushed here (a flush per recorded batch costs more than the
        batch): the callback calls `flush` at the end of each epoch and of fit.
        """
        if probe.slots == 1:
            current = self._drain_in_one_call(probe)
        else:
            steps, grads, updates, current = probe.read()
            for slot in np.argsort(steps):
                step = int(steps[slot])
                if step > self.written_step:
                    self._write_step(probe, step, grads, updates, slot)
                    self.written_step = step
        if probe.scaled:  # only a loss scaler skips batches
            self._write_skips(probe, None if final else current)
        return current

    def _write_skips(self, probe: StepProbe, current: int | None) -> None:
        """One SKIPPED event per step whose recorded batches the loss scaler skipped.

        A skipped batch leaves the optimizer's step where it was, so the next
        batch records the same step: the skips and that step's tables share
        it. A step's skips are written once training has moved past it (or
        `current` is None), so the event counts all of them.
        """
        steps, counts, scales = probe.read_skips()
        for slot in np.argsort(steps):
            step = int(steps[slot])
            if step > self.skips_written_step and (current is None or step < current):
                event = loss_scale.skipped_event(step, float(scales[slot]), int(counts[slot]))
                self._blobs(
                    Kind.EVENTS, [event.to_json()], step, {}, name=loss_scale.SKIPPED_RECORD
                )
                self.skips_written_step = step

    def flush(self) -> None:
        """Flushes the sink if anything was written since the last flush.

        A flush with nothing new would look to the sink like a file that
        stopped growing (its check for a full disk).
        """
        if self.dirty:
            self.dirty = False
            self.sink.flush()

    def _drain_in_one_call(self, probe: StepProbe) -> int:
        """A one-slot ring (one batch per call): reads it and the step, and
        writes the slot's tables if they are new, in one concrete-function call
        (a read call and a write call cost about twice as much); returns the
        current step. The FlowGraph, rules and their events follow on the host."""
        names = tuple(
            loss.name
            for loss in probe.losses
            if probe.grad_tables is not None and loss.name in probe.captured
        )
        key = (names, probe.grad_tables is not None)
        drainer = self._drainers.get(key)
        if drainer is None:
            drainer = self._drainers[key] = self._drainer(probe, names)
        steps, updates, current, grads, told = [
            v.numpy() for v in drainer(tf.constant(self.written_step, tf.int64))
        ]
        first, last, queued = told.tolist()
        self.sink.count(queued, first, last)  # the flush the in-graph gate would have decided
        step = int(steps[0])
        if step > self.written_step:
            self.dirty = True
            self._write_step(probe, step, grads if names else None, updates, 0, tables_written=True)
            self.written_step = step
        return int(current)

    def _drainer(self, probe: StepProbe, names: tuple[str, ...]) -> Any:
        scopes = probe.vlayout.layout.scopes

        def zeros(kind):
            return np.zeros([len(scopes), len(KIND_SPECS[kind].columns)], np.float32)

        heads = [
            self._table(Kind.GRAD_STATS, loss, scopes, zeros(Kind.GRAD_STATS))[:2]
            for loss in probe.losses
            if loss.name in names
        ]
        update_head = self._table(Kind.UPDATE_STATS, None, scopes, zeros(Kind.UPDATE_STATS))[:2]
        rows = [i for i, loss in enumerate(probe.losses) if loss.name in names]

        def drain(written: tf.Tensor) -> list[tf.Tensor]:
            steps, updates, current, grads = probe.read_tensors()
            step = steps[0]

            def write() -> tf.Tensor:
                records = [(tag, meta, grads[0, i], False) for (tag, meta), i in zip(heads, rows)]
                return self.sink.write_counted(records + [(*update_head, updates[0], False)], step)

            told = tf.cond(step > written, write, lambda: tf.zeros([3], tf.int64))
            with tf.control_dependencies([told]):
                return [
                    tf.identity(steps),
                    tf.identity(updates),
                    tf.identity(current),
                    tf.identity(grads) if grads is not None else tf.zeros([0]),
                    tf.identity(told),
                ]

        return tf.function(drain, autograph=False).get_concrete_function(
            tf.TensorSpec([], tf.int64)
        )

    def _write_step(
        self, probe: StepProbe, step: int, grads, updates, slot: int, tables_written: bool = False
    ) -> None:
        events = []
        if probe.flowgraph is not None and not self._flowgraph_written:
            self._flowgraph_written = True
            rules = {"rules": self.checker.rule_texts} if self.checker else {}
            self._blobs(Kind.FLOWGRAPH, [probe.flowgraph.to_json()], step, rules)
            if self.checker is not None:
                events += self.checker.at_trace(probe.flowgraph, step)
        scopes = probe.vlayout.layout.scopes
        tables = {}
        records = []
        for i, loss in enumerate(probe.losses):
            if grads is not None and loss.name in probe.captured:
                tables[loss.name] = grads[slot, i]
                records.append(self._table(Kind.GRAD_STATS, loss, scopes, grads[slot, i]))
        records.append(self._table(Kind.UPDATE_STATS, None, scopes, updates[slot]))
        if not tables_written:
            self._write_tables(records, step)
        if self.checker is not None:
            events += self.checker.at_step(step, tables, scopes, updates[slot])
        if events:
            self._blobs(Kind.EVENTS, [e.to_json() for e in events], step, {})
            self.flush()
            if self.on_violation != LOG:
                apply_policy(events, self.on_violation)

    def _table(
        self, kind: Kind, loss: OutputLoss | None, scopes, values: np.ndarray
    ) -> tuple[str, bytes, np.ndarray]:
        """(tag, metadata, encoded values) of one table record."""
        name = "" if loss is None else loss.name
        tag = tag_for(kind, name)
        if tag not in self._metadata:
            attrs = dict(self.attrs)
            if loss is not None:
                weight = 1.0 if loss.weight is None else loss.weight
                attrs.update(weighted=True, loss_weight=weight, source="keras.compile")
            info = make_info(kind, name, scopes, attrs=attrs)
            self._metadata[tag] = (info, create_summary_metadata(info).SerializeToString())
        info, meta = self._metadata[tag]
        return tag, meta, encode_table(info, values)

    def _write_tables(self, records: list[tuple[str, bytes, np.ndarray]], step: int) -> None:
        """Writes one step's tables in one call of a compiled function (traced
        once per set of tags): eager summary writes cost ~1 ms each."""
        key = tuple(tag for tag, _, _ in records)
        write = self._table_writers.get(key)
        if write is None:
            write = self._table_writers[key] = self._table_writer(records)
        self.dirty = True
        told = write(
            tf.constant(step, tf.int64), *[tf.constant(values) for _, _, values in records]
        )
        first, last, queued = told.numpy().tolist()
        self.sink.count(queued, first, last)

    def _table_writer(self, records: list[tuple[str, bytes, np.ndarray]]) -> Any:
        """A concrete function (called with tensors: a quarter of a tf.function's call cost)."""
        heads = [(tag, meta) for tag, meta, _ in records]
        signature = [tf.TensorSpec([], tf.int64)] + [
            tf.TensorSpec(v.shape, tf.float32) for _, _, v in records
        ]

        def write(step: tf.Tensor, *values: tf.Tensor) -> tf.Tensor:
            return self.sink.write_counted(
                [(tag, meta, v, False) for (tag, meta), v in zip(heads, values)], step
            )

        return tf.function(write, autograph=False).get_concrete_function(*signature)

    def _blobs(
        self, kind: Kind, documents: list, step: int, extra: dict[str, Any], name: str = ""
    ) -> None:
        info = make_info(kind, name, attrs={**self.attrs, **extra})
        meta = create_summary_metadata(info).SerializeToString()
        self._write(
            tag_for(kind, name), meta, np.array(encode_blobs(info, documents), dtype=object), step
        )

    def _write(self, tag: str, meta: bytes, value: np.ndarray, step: int) -> None:
        self.dirty = True
        self.sink.write(
            tag, meta, tf.constant(value), tf.constant(step, tf.int64), tf.constant(True)
        )
