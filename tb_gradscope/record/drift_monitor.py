"""DriftMonitor: records each pair's DRIFT table at recorded steps.

Call `record()` once per training step, after the user's target update, eagerly
or inside `tf.function`. A step s is recorded when s % every_n_steps == 0, or
s % every == 0 for a pair declaring a hard-copy period (so copy steps are seen).

Transient state, per pair: one snapshot of the target and online variables
(2x the pair's size, allocated once), written only at the step before a
recorded step, plus the step it was taken at. So every recorded step s is
compared with s - 1, which makes tau exact for an EMA and shows a hard copy as
tau = 1 with drift exactly 0 at the copy step.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Sequence

import numpy as np
import tensorflow as tf

from tb_gradscope.format.metadata import DRIFT_COLUMNS, Kind, create_summary_metadata, make_info, tag_for
from tb_gradscope.record import drift as drift_lib
from tb_gradscope.pairs import naming
from tb_gradscope.pairs.pairs import Pair
from tb_gradscope.record import distribute
from tb_gradscope.record.emit import recorded_only
from tb_gradscope.record.stats import RollUp
from tb_gradscope.record.warn import warn_once
from tb_gradscope.record.writing import NoWriterError, SummarySink

_no_autograph = tf.autograph.experimental.do_not_convert
_NEVER = -(2**62)


@dataclasses.dataclass
class _PairState:
    """What the monitor keeps per pair (never checkpointed)."""

    pair: Pair
    layout: Any
    rollup: RollUp
    tag: str
    prev_target: tf.Variable
    prev_online: tf.Variable
    snap_step: tf.Variable


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
      every_n_steps: record steps that are multiples of it.
      step: an int64 tf.Variable holding the current step (e.g. a Recorder's
        `step`); None keeps an own counter that `record()` advances.
      optimizers: optimizers (Keras 3) whose written variables are checked for
        target variables when a record is traced.
      written_by_optimizer: variables known to be written by an optimizer.
      name: used in messages.
      sink: a `tb_gradscope.record.writing.SummarySink` to write through
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
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
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
            raise ValueError(f"pair names must be unique, got {names}; pass name=... to tell them apart")
        super().__init__(name=name)
        self.every_n_steps = every_n_steps
        self._optimizers = list(optimizers)
        self._written = {naming.variable_key(v) for v in written_by_optimizer}
        self._own_step = step is None
        self._disabled = False
        self._metadata: dict[str, bytes] = {}
        with tf.init_scope():
            self.step = step if step is not None else tf.Variable(0, dtype=tf.int64, name="drift_step")
            self._sink = sink if sink is not None else SummarySink(logdir, name)
            self._states = [self._make_state(p) for p in pairs]
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

    @_no_autograph
    def record(self, step: Any = None) -> None:
        """Records every pair due at `step` (default: the monitor's step).

        With an own counter and no `step`, advances the counter afterwards.
        """
        if not self._disabled:
            try:
                current = tf.cast(self.step if step is None else step, tf.int64)
                recorded_only(self._any_due(current), lambda: self._work_fn(current), lambda: tf.constant(False))
            except NoWriterError:
                raise
            except Exception as e:  # monitoring must never break the training loop
                self._disabled = True
                warn_once(
                    (id(self), "internal"),
                    f"DriftMonitor '{self.name}' stopped recording after an error "
                    f"({type(e).__name__}: {e}); training continues unaffected",
                )
        if self._own_step and step is None:
            self.step.assign_add(1)

    def due_at(self, step: int) -> bool:
        """Whether any pair is recorded at `step` (a host-side int)."""
        return step >= 0 and any(
            step % self.every_n_steps == 0 or (s.pair.every and step % s.pair.every == 0) for s in self._states
        )

    @_no_autograph
    def snapshot(self) -> None:
        """Copies every pair's variables now, as `record()` does at the step
        before a recorded one (for a step known on the host to be such a step)."""
        if self._disabled:
            return
        try:
            current = tf.cast(self.step.read_value(), tf.int64)
            for state in self._states:
                self._snapshot(state, current)
        except Exception as e:  # monitoring must never break the training loop
            self._disabled = True
            warn_once(
                (id(self), "internal"),
                f"DriftMonitor '{self.name}' stopped recording after an error "
                f"({type(e).__name__}: {e}); training continues unaffected",
            )

    def flush(self) -> None:
        self._sink.flush()

    def close(self) -> None:
        self._sink.close()

    def _make_state(self, pair: Pair) -> _PairState:
        layout = drift_lib.pair_layout(pair)

        def copies(variables: Sequence[Any]) -> tf.Variable:
            size = sum(int(np.prod(v.shape)) for v in variables)
            dtype = drift_lib.flat_dtype(variables)
            return distribute.local_variable(lambda: tf.zeros([size], dtype), trainable=False)

        return _PairState(
            pair=pair,
            layout=layout,
            rollup=RollUp.from_layout(layout),
            tag=tag_for(Kind.DRIFT, pair.name),
            prev_target=copies(pair.target),
            prev_online=copies(pair.online),
            snap_step=distribute.local_variable(_NEVER, dtype=tf.int64, trainable=False),
        )

    def _due(self, step: tf.Tensor, pair: Pair) -> tf.Tensor:
        due = tf.equal(tf.math.floormod(step, self.every_n_steps), 0)
        if pair.every:
            due = tf.logical_or(due, tf.equal(tf.math.floormod(step, pair.every), 0))
        return tf.logical_and(due, step >= 0)

    def _any_due(self, step: tf.Tensor) -> tf.Tensor:
        """One predicate for the whole call, so unrecorded steps cost one cond."""
        due = [self._due(s, st.pair) for st in self._states for s in (step, step + 1)]
        return tf.reduce_any(tf.stack(due))

    def _work(self, step: tf.Tensor) -> tf.Tensor:
        """Pairs sharing a schedule are recorded together: one branch and one
        write for their tables (read before), one branch for their snapshots."""
        groups: dict[int | None, list[_PairState]] = {}
        for state in self._states:
            groups.setdefault(state.pair.every, []).append(state)
        for states in groups.values():
            pair = states[0].pair

            def write(states=states) -> tf.Tensor:
                records = [(s.tag, self._metadata_for(s), self._table(s, step), False) for s in states]
                return self._sink.write_due(records, step)

            def snapshot(states=states) -> tf.Tensor:
                for state in states:
                    self._snapshot(state, step)
                return tf.constant(True)

            done = recorded_only(self._due(step, pair), write, lambda: tf.constant(False))
            with tf.control_dependencies([done]):
                snapshot_due = self._due(step + 1, pair)
            recorded_only(snapshot_due, snapshot, lambda: tf.constant(False))
        return tf.constant(True)

    def _table(self, state: _PairState, step: tf.Tensor) -> tf.Tensor:
        """The pair's DRIFT table at `step` (its snapshots are of `step - 1` or it has none)."""
        written = [naming.variable_key(v) in self._written_set() for v in state.pair.target]
        counts = drift_lib.optimizer_var_counts(state.layout, written)
        have_previous = tf.equal(state.snap_step, step - 1)
        return drift_lib.pair_table(
            state.pair, state.rollup, state.prev_target, state.prev_online, have_previous, counts
        )

    def _snapshot(self, state: _PairState, step: tf.Tensor) -> tf.Tensor:
        state.prev_target.assign(drift_lib.flatten(state.pair.target))
        state.prev_online.assign(drift_lib.flatten(state.pair.online))
        state.snap_step.assign(step)
        return tf.constant(True)

    def _written_set(self) -> set[int]:
        return self._written | naming.optimizer_variable_keys(self._optimizers)

    def _metadata_for(self, state: _PairState) -> bytes:
        if state.tag not in self._metadata:
            pair = state.pair
            attrs = pair.declared()
            attrs["state_scopes"] = drift_lib.state_scopes(pair)
            attrs["online_scopes"] = drift_lib.online_scopes(pair, state.layout)
            info = make_info(Kind.DRIFT, pair.name, state.layout.scopes, attrs)
            info = dataclasses.replace(info, columns=DRIFT_COLUMNS)
            self._metadata[state.tag] = create_summary_metadata(info).SerializeToString()
        return self._metadata[state.tag]
