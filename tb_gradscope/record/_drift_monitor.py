"""DriftMonitor: records each pair's DRIFT table at recorded steps.

Call `record()` once per training step, after the user's target update, eagerly
or inside `tf.function`. A step is recorded when it starts at a multiple of
every_n_steps: `record()` sees that step plus `offset`, the advances of the
step counter between the step's start and the call (1 after a Recorder's
`apply`), so the pairs are recorded in the very step, and under
`Recorder.function` in the very call, that records gradients, and labelled
with that step's start, as its gradients are. A pair's declared
`every=` / `tau=` say what to expect, not when to record: a copy between two
records is judged from how far the target moved between them, whichever step
of the period it ran at.

Transient state, for all pairs together: one snapshot of their target and
online variables (2x the pairs' size, allocated once), written only at the
step before a recorded step, plus the step it was taken at (a
`Recorder.function` call reads the values at its own start instead: `Before`).
So every record at seen step t is compared with t - 1, which makes tau exact
for an EMA and shows a hard copy made in that step as tau = 1 with drift
exactly 0. A second copy, of the targets alone (1x their size), is kept at
each record, so a record also says how far the target moved since the
previous one (`target_moved`): a sync between two records is judged from
that. The tables of all pairs come from one kernel (`drift.variable_sums` over
all of them) and one write, split per pair.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.core import pairs as core_pairs
from tb_gradscope.core.pairs import Pair
from tb_gradscope.core.tables import drift_info
from tb_gradscope.core.warn import warn_once
from tb_gradscope.format.metadata import (
    Kind,
    create_summary_metadata,
    tag_for,
)
from tb_gradscope.pairs import _naming as naming
from tb_gradscope.record import _distribute as distribute
from tb_gradscope.record import _drift as drift_lib
from tb_gradscope.record import _op_scope as op_scope
from tb_gradscope.record._stats import RollUp
from tb_gradscope.record._writing import NoWriterError, SummarySink, recorded_only

_NEVER = -(2**62)


@dataclasses.dataclass(frozen=True)
class Before:
    """[target; online] of every pair read at the start of a traced call
    (`DriftMonitor.read_sides`), which a record later in the call compares with
    instead of a snapshot taken by an earlier call; `one_step`: whether the
    call advances the step once, so that they are of the step before the
    record's (else tau reads NaN, as without a snapshot). At the run's first
    step they are the pairs as initialised."""

    sides: tf.Tensor
    one_step: bool | tf.Tensor


@dataclasses.dataclass
class _PairState:
    """What the monitor keeps per pair."""

    pair: Pair
    layout: Any
    tag: str


@dataclasses.dataclass
class _Group:
    """All pairs, laid out one after another, and their snapshot (never checkpointed)."""

    states: list[_PairState]
    rows: drift_lib.RowLayout  # every target variable, pair after pair
    rollup: RollUp  # the pairs' scopes one after another
    dtype: tf.DType
    previous: tf.Variable  # [target; online] one step earlier, padded by `rows`
    snap_step: tf.Variable
    recorded: tf.Variable  # the targets at the previous DRIFT record, padded by `rows`
    recorded_step: tf.Variable

    @property
    def targets(self) -> list[Any]:
        return [v for s in self.states for v in s.pair.target]

    @property
    def onlines(self) -> list[Any]:
        return [v for s in self.states for v in s.pair.online]


class DriftMonitor(tf.Module):
    """Records drift, effective tau and update mode of target/online pairs.

    Example::

        pairs = detect_pairs(models=[target, online])   # or pair_models(...)
        monitor = DriftMonitor(pairs, logdir="logs/run", every_n_steps=10)
        for step in range(steps):
            train_step()                  # optimizer updates online
            soft_update(target, online)   # the user's EMA or copy
            monitor.record()

    `tf.train.Checkpoint(monitor=monitor)` saves the step counter (and nothing
    else: snapshots are transient), so a resumed run continues its steps.

    Args:
      pairs: the `Pair`s to watch.
      logdir: a directory for the monitor's own event file; None writes to the
        default `tf.summary` writer. To share a run directory with a Recorder,
        use None (one default writer) or `sink`: TensorBoard's Python loader
        reads a directory's event files one after another and misses records
        of two files written side by side.
      every_n_steps: record the steps that start at multiples of it.
      step: an int64 tf.Variable holding the current step (e.g. a Recorder's
        `step`); None keeps an own counter that `record()` advances.
      optimizers: optimizers (Keras 3) whose written variables are checked for
        target variables when a record is traced.
      written_by_optimizer: variables known to be written by an optimizer.
      name: used in messages.
      sink: a `tb_gradscope.record._writing.SummarySink` to write through
        instead (the Recorder passes its own); excludes `logdir`.
    """

    def __init__(
        self,
        pairs: Sequence[Pair],
        logdir: str | None = None,
        every_n_steps: int = 10,
        step: tf.Variable | None = None,
        optimizers: Sequence[Any] = (),
        written_by_optimizer: Iterable[Any] = (),
        name: str = "drift",
        sink: SummarySink | None = None,
    ):
        if (
            isinstance(every_n_steps, bool)
            or not isinstance(every_n_steps, int)
            or every_n_steps < 1
        ):
            raise ValueError(f"every_n_steps must be an int >= 1, got {every_n_steps!r}")
        pairs = list(pairs)
        if not pairs or not all(isinstance(p, Pair) for p in pairs):
            raise ValueError(
                "DriftMonitor needs a non-empty list of Pair (from pair_prefixes, "
                "pair_models, pair_ema or detect_pairs)"
            )
        if sink is not None and logdir is not None:
            raise ValueError("pass DriftMonitor either logdir or sink, not both")
        names = [p.name for p in pairs]
        if len(set(names)) != len(names):
            raise ValueError(
                f"pair names must be unique, got {names}; pass name=... to tell them apart"
            )
        super().__init__(name=name)
        self.every_n_steps = every_n_steps
        self._optimizers = list(optimizers)
        self._written = {naming.variable_key(v) for v in written_by_optimizer}
        self._own_step = step is None
        self._disabled = False
        self._metadata: dict[str, bytes] = {}
        with tf.init_scope():
            self.step = (
                step if step is not None else tf.Variable(0, dtype=tf.int64, name="drift_step")
            )
            self._sink = sink if sink is not None else SummarySink(logdir, name)
            self._states = [self._make_state(p) for p in pairs]
            self._group = self._make_group(self._states)
        # A call that is never inlined: an unrecorded step then skips one op
        # instead of pushing "not taken" through every op of the record.
        self._work_fn = tf.function(
            self._work, autograph=False, experimental_attributes={"_noinline": True}
        )

    @property
    def pairs(self) -> list[Pair]:
        return [s.pair for s in self._states]

    def note_optimizer_variables(self, variables: Iterable[Any]) -> None:
        """Declares variables an optimizer writes (the recorder calls this)."""
        self._written |= {naming.variable_key(v) for v in variables}

    @op_scope.kernel("drift")
    def read_sides(self) -> tf.Tensor:
        """[target; online] of every pair now, for `Before` (a read at the start
        of a traced call that records nothing is pruned from its graph)."""
        g = self._group
        return drift_lib.sides_now(g.targets, g.onlines, g.rows, g.dtype)

    @tf.autograph.experimental.do_not_convert
    def record(
        self,
        step: Any = None,
        offset: int = 0,
        due: bool = False,
        before: Before | None = None,
    ) -> None:
        """Records every pair due at `step` (default: the monitor's step), the
        step counter `offset` advances past the start of the step it runs in.

        With an own counter and no `step`, advances the counter afterwards.
        `due`: the caller runs this call only in steps that record (a
        `Recorder.function` variant picked by step), so no in-graph gate.
        `before`: the values at the start of the call this record is traced
        in, compared with instead of a snapshot, so that no earlier call has
        to take one.
        """
        with op_scope.part("drift"):
            if not self._disabled:
                try:
                    # Read now (a cast of an int64 variable is the variable, read where used).
                    current = tf.cast(
                        tf.convert_to_tensor(self.step if step is None else step), tf.int64
                    )
                    if due or before is not None:
                        self._work(current, offset, due, before)
                    else:
                        recorded_only(
                            self._any_due(current - offset),
                            lambda: self._work_fn(current, offset),
                            _not_done,
                        )
                except NoWriterError:
                    raise
                except Exception as e:  # monitoring must never break the training loop
                    self._step_aside(e)
            if self._own_step and step is None:
                self.step.assign_add(1)

    def snapshot_before(self, step: int) -> None:
        """Reads the pairs now as the end of step `step - 1` (eagerly), when a
        record is due at `step`: where no call precedes the first step (the
        Keras callback's `on_train_begin`), its record then compares with the
        pairs as initialised, as every later record compares with the step
        before."""
        if self._disabled or not self.due_at(step):
            return
        try:
            self._snapshot(self._group, tf.constant(step - 1, tf.int64))
        except Exception as e:  # the record at `step` then has no step before, as without it
            warn_once(
                (id(self), "snapshot_before"),
                f"DriftMonitor '{self.name}': the pairs could not be read before step {step} "
                f"({type(e).__name__}: {e}); its drift record's step columns (tau, "
                "target_step) read NaN. Training continues unaffected",
            )

    def due_at(self, step: int) -> bool:
        """Whether the pairs are recorded in a step starting at `step` (a host-side int)."""
        return step >= 0 and step % self.every_n_steps == 0

    def _step_aside(self, error: Exception) -> None:
        """Stops recording for good after an internal error, said once."""
        self._disabled = True
        warn_once(
            (id(self), "internal"),
            f"DriftMonitor '{self.name}' stopped recording after an error "
            f"({type(error).__name__}: {error}); training continues unaffected",
        )

    def flush(self) -> None:
        self._sink.flush()

    def close(self) -> None:
        self._sink.close()

    def _make_state(self, pair: Pair) -> _PairState:
        return _PairState(
            pair=pair, layout=core_pairs.pair_layout(pair), tag=tag_for(Kind.DRIFT, pair.name)
        )

    @staticmethod
    def _make_group(states: Sequence[_PairState]) -> _Group:
        """All pairs as one group: one snapshot, one kernel, one write."""
        variables = [v for s in states for v in (*s.pair.target, *s.pair.online)]
        rows = drift_lib.RowLayout.of([v for s in states for v in s.pair.target])
        dtype = drift_lib.flat_dtype(variables)
        return _Group(
            states=list(states),
            rows=rows,
            rollup=RollUp.concatenate([RollUp.from_layout(s.layout) for s in states]),
            dtype=dtype,
            previous=distribute.local_variable(
                lambda: tf.zeros([2 * rows.length], dtype), trainable=False
            ),
            snap_step=distribute.local_variable(_NEVER, dtype=tf.int64, trainable=False),
            recorded=distribute.local_variable(
                lambda: tf.zeros([rows.length], dtype), trainable=False
            ),
            recorded_step=distribute.local_variable(_NEVER, dtype=tf.int64, trainable=False),
        )

    def _due(self, start: tf.Tensor) -> tf.Tensor:
        """Whether a step starting at `start` is recorded (`due_at` in the graph)."""
        out = tf.equal(tf.math.floormod(start, self.every_n_steps), 0)
        return tf.logical_and(out, start >= 0)

    def _any_due(self, start: tf.Tensor) -> tf.Tensor:
        """One predicate for the whole call (recorded, or the snapshot for the
        next step), so unrecorded steps cost one cond."""
        return tf.logical_or(self._due(start), self._due(start + 1))

    def _work(
        self,
        step: tf.Tensor,
        offset: int = 0,
        due: bool = False,
        before: Before | None = None,
    ) -> tf.Tensor:
        """All pairs are recorded together at `step` when the step that
        started `offset` steps earlier is due: one branch (none when `due`),
        one kernel and one write for their tables, one branch for their
        snapshot (none with `before`)."""
        group = self._group
        previous = None if before is None else (before.sides, before.one_step)
        start = step - offset  # the step this call runs in began here

        def write() -> tf.Tensor:
            tables = self._tables(group, step, previous)
            records = [
                (s.tag, self._metadata_for(s), t, False) for s, t in zip(group.states, tables)
            ]
            # Labelled with the step it ends, as its gradients and update are.
            return self._sink.write_due(records, start)

        def snapshot() -> tf.Tensor:
            return self._snapshot(group, step)

        done = write() if due else recorded_only(self._due(start), write, _not_done)
        if before is None:
            with tf.control_dependencies([done]):
                recorded_only(self._due(start + 1), snapshot, _not_done)
        return tf.constant(True)

    def _tables(
        self, group: _Group, step: tf.Tensor, previous: tuple[tf.Tensor, tf.Tensor] | None = None
    ) -> list[tf.Tensor]:
        """The DRIFT table of each pair of `group` at `step`, compared with
        `previous` ([target; online] and whether they are of `step - 1`), by
        default the group's snapshot (of `step - 1` or none)."""
        written = self._written_set()
        counts = np.concatenate(
            [
                core_pairs.optimizer_var_counts(
                    s.layout, [naming.variable_key(v) in written for v in s.pair.target]
                )
                for s in group.states
            ]
        )
        if previous is None:
            previous = (group.previous.read_value(), tf.equal(group.snap_step, step - 1))
        before, have_previous = previous
        now = drift_lib.sides_now(group.targets, group.onlines, group.rows, group.dtype)
        recorded = group.recorded.read_value()
        sums = group.rollup.sum(drift_lib.variable_sums(now, before, group.rows, recorded))
        have_recorded = tf.logical_and(group.recorded_step > _NEVER, group.recorded_step < step)
        table = drift_lib.drift_table(sums, have_previous, counts, have_recorded)
        with tf.control_dependencies([table]):  # the next record's movement is measured from here
            group.recorded.assign(now[: group.rows.length])
            group.recorded_step.assign(step)
        if len(group.states) == 1:
            return [table]
        return tf.split(table, [len(s.layout.scopes) for s in group.states])

    def _snapshot(self, group: _Group, step: tf.Tensor) -> tf.Tensor:
        group.previous.assign(
            drift_lib.sides_now(group.targets, group.onlines, group.rows, group.dtype)
        )
        group.snap_step.assign(step)
        return tf.constant(True)

    def _written_set(self) -> set[int]:
        return self._written | naming.optimizer_variable_keys(self._optimizers)

    def _metadata_for(self, state: _PairState) -> bytes:
        if state.tag not in self._metadata:
            info = drift_info(state.pair, state.layout)
            self._metadata[state.tag] = create_summary_metadata(info).SerializeToString()
        return self._metadata[state.tag]


def _not_done() -> tf.Tensor:
    return tf.constant(False)
