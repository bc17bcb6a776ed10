"""`GraphRecorder`: records TF1 graph-mode training through the user's own run calls.

It adds stats ops to the user's graph (per loss: `tf.gradients` of the loss
with respect to the scoped variables, rolled up to a GRAD_STATS table; they run
only when fetched) and runs the static analysis once. At a recorded step the
gradient tables are fetched in the user's own run call (no second forward
pass) and written into an event file from the host (`writer.py`); the graph
gets no summary ops. See `steps.py` for what a step is, `rules.py` for when rules are checked,
docs/TF1.md for the guide.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from tb_gradscope.format import Event, Kind, make_info
from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS
from tb_gradscope.integrations.tf1 import _args as args
from tb_gradscope.integrations.tf1 import _graph as graphs
from tb_gradscope.integrations.tf1._calls import CalledOps, FixedCalls
from tb_gradscope.integrations.tf1._ops import (
    NAME_SCOPE,
    build_conflict_ops,
    build_loss_ops,
    build_update_ops,
    rows_written,
)
from tb_gradscope.integrations.tf1._pairs import (
    PairRecorder,
    pair_names,
    paired_variables,
    resolve_pairs,
)
from tb_gradscope.integrations.tf1._rules import STEP_EVENTS, TRACE_EVENTS, GraphRuleSteps
from tb_gradscope.integrations.tf1._static import static_flowgraph
from tb_gradscope.integrations.tf1._steps import CallPlan, Close, StepClock
from tb_gradscope.integrations.tf1._writer import RecordWriter
from tb_gradscope.record import _options as options
from tb_gradscope.record._stats import RollUp
from tb_gradscope.record._warn import warn_once
from tb_gradscope.scopes import ScopeSpec, build_layout, variable_name

if TYPE_CHECKING:
    from tb_gradscope.integrations.tf1._session import RecordingSession

Run = Callable[..., Any]
PAUSED_WINDOWS = 4  # update windows of train ops in blocks held at once (steps.py)
_SERIALS = itertools.count()  # warn_once keys: id() of a dead recorder may be reused


@dataclasses.dataclass(frozen=True)
class _Pending:
    plan: CallPlan
    fetches: Mapping[str, tf.Tensor]
    called: frozenset


class GraphRecorder:
    """Records per-loss, per-scope gradient flow of a TF1 graph into `logdir`.

    Example:

        gs = GraphRecorder("logs/run1", losses={"td": loss},
                           train_ops={"td": train_op}, every_n_steps=10)
        sess = gs.wrap(tf.compat.v1.Session())

    Args:
      logdir: directory for the event file (created if needed).
      losses: {name: scalar loss tensor, or a gradient start point
        `StartPoint(tensor, output_gradients=g)`, the TF1 spelling being
        `tf.gradients(tensor, xs, grad_ys=g)` (DQN 3.0, DDPG actors).
      train_ops: {loss name: the op that trains it} (the op returned by
        `minimize` or `apply_gradients`); a step is a run call that includes
        one of these ops. Several losses may share one op.
      every_n_steps: record steps divisible by this (counted per train op).
      variables: the variables whose scopes are reported (default: the graph's
        trainable variables plus both sides of every pair, so a
        `trainable=False` target net has its rows). Optimizer slots and the
        global step never are.
      scopes: include/exclude patterns and depth cap for the scope tree.
      pairs: target/online pairs whose drift is recorded (DRIFT records):
        {target scope: online scope} (looked up among all the graph's
        variables, trainable or not), a list of `tb_gradscope.pairs.Pair`
        (`pair_scopes("target_net", "eval_net", every=C)` declares a
        hard-replacement period, `tau=` an EMA rate), or "auto": the pairs
        `tb_gradscope.pairs.detect_pairs` finds by scope name among all the
        graph's variables (`Actor/target` and `Actor/eval`). See `pairs.py`.
      analyze: run the static analysis and write the FlowGraph (rules need
        it to tell `ignored` from `updates`).
      rules: flow rules, as for the TF2 Recorder: Rule objects or strings
        ("never(td, target_net/*)"), or a TOML rules file path. Checked on the
        FlowGraph when the recorder is built and at every recorded step;
        violations are written as EVENTS records (and kept in `violations`)
        before `on_violation` applies; the rule texts go in the FLOWGRAPH
        record for `tb-gradscope check` and the tab.
      on_violation: "log", "warn" or "raise": FlowRuleViolation from the
        wrapped `run` call, after the violations are written (a violation
        the FlowGraph shows: from the first train call, before it runs).
        None: the rules file's policy, else "log".
      grad_columns: the optional gradient columns recorded, from ("max_abs",
        "zero_frac") (default both); one left out is not computed and reads
        NaN, "not recorded" (as `Recorder(grad_columns=...)`).

    Steps: a loss's step is how many run calls included its train op before
    this one (0-based; offset by the global step when the session starts, so
    a resumed run continues). Alternating `sess.run(train1)` and
    `sess.run(train2)` thus records both losses at the same steps. A recorded
    step costs the gradient tables in the user's own run call plus two small
    calls: a snapshot of the variables before the step's first train call and
    the update norms after its last (||delta theta|| needs the values before
    the user's train op, which is not ours to add control dependencies to).

    Failures inside gradscope never stop training: they are reported once and
    recording stops. Build it after the model and the optimizers, before the
    graph is finalized (before `MonitoredTrainingSession`).
    """

    def __init__(
        self,
        logdir: str,
        losses: Mapping[str, Any],
        train_ops: Mapping[str, Any],
        every_n_steps: int = 100,
        *,
        variables: Sequence[tf.Variable] | None = None,
        scopes: ScopeSpec | None = None,
        pairs: Any = None,
        analyze: bool = True,
        rules: Any = None,
        on_violation: str | None = None,
        grad_columns: Collection[str] = OPTIONAL_GRAD_COLUMNS,
    ):
        args.check_plain_args(logdir, every_n_steps, scopes, analyze)
        recorded_columns = options.check_grad_columns(grad_columns)
        variables = args.check_variables(variables)
        graph = args.graph_of(losses)
        self.graph = graph
        self._starts = {
            str(name): args.resolve_start(graph, name, value) for name, value in losses.items()
        }
        self._train_ops = args.resolve_train_ops(graph, self._starts, train_ops)
        pair_list = resolve_pairs(pairs, graph)
        if rules and not analyze:
            raise ValueError(
                "rules need the static analysis (analyze=True): without the FlowGraph an "
                "`ignored` cell (gradient arrives, var_list leaves the scope out) cannot be "
                "told from `updates`; drop analyze=False or rules="
            )
        self._clock = StepClock(
            {loss: (op.name if op is not None else None) for loss, op in self._train_ops.items()},
            every_n_steps,
            slots=PAUSED_WINDOWS,
        )
        trained = sorted(
            {op for op in self._train_ops.values() if op is not None}, key=lambda op: op.name
        )
        chosen = graphs.scoped_variables(
            graph, variables if variables is not None else _default_variables(graph, pair_list)
        )
        renamed = pair_names(pair_list, graph)  # EMA shadows under their pair's names
        names = [renamed.get(v.op, v.name) for v in chosen]
        self.layout = build_layout(names, scopes)
        by_name = {variable_name(n): v for n, v in zip(names, chosen)}
        self.variables = [by_name[n] for n in self.layout.variable_names]
        self._flowgraph = (
            static_flowgraph(graph, self._starts, self.variables, self.layout, self._train_ops)
            if analyze
            else None
        )
        self._rules = GraphRuleSteps(rules or [], on_violation, self.layout.scopes, str(logdir))
        self._rules.at_build(self._flowgraph)
        self._unsettled: list[Event] = []  # written, policy not applied yet
        rollup = RollUp.from_layout(self.layout)
        self._loss_ops = build_loss_ops(
            graph, self._starts, self.variables, rollup, self._train_ops, recorded_columns
        )
        self._conflicts = build_conflict_ops(graph, self._loss_ops, self.layout, rollup)
        self._conflict_steps: dict[str, int] = {}  # pair -> the last step it was fetched at
        self._update_ops = build_update_ops(graph, self.variables, rollup, trained, PAUSED_WINDOWS)
        self._rows_of_op = rows_written(self.layout, self.variables, trained)
        self._pairs = PairRecorder(graph, pair_list, trained, every_n_steps) if pair_list else None
        with graph.as_default():
            self._noop = tf.no_op(name=f"{NAME_SCOPE}/skipped_train_op")
        self._called_ops = CalledOps(graph, {op: op.name for op in trained})
        self._fixed = FixedCalls()
        self._global_step = graphs.global_step_of(graph)
        self._offset_read = False
        self._first_step = 0
        self._flowgraph_written = False
        self._infos = {
            name: make_info(Kind.GRAD_STATS, name, self.layout.scopes) for name in self._starts
        }
        self._update_info = make_info(Kind.UPDATE_STATS, "", self.layout.scopes)
        self._conflict_infos = {
            name: make_info(
                Kind.CONFLICT,
                name,
                c.scopes,
                {"losses": list(c.losses), "every_n_steps": every_n_steps},
            )
            for name, c in self._conflicts.items()
        }
        self._writer = RecordWriter(os.fspath(logdir))
        self.logdir = os.fspath(logdir)
        self.disabled = False
        self._serial = next(_SERIALS)

    def wrap(self, session: Any) -> RecordingSession:
        """A session whose `run()` also records; everything else is `session`'s."""
        from tb_gradscope.integrations.tf1._session import RecordingSession

        return RecordingSession(session, self)

    def hook(self) -> tf.compat.v1.train.SessionRunHook:
        """A SessionRunHook recording into this recorder (MonitoredTrainingSession)."""
        from tb_gradscope.integrations.tf1._session import GradscopeHook

        return GradscopeHook(self)

    @property
    def violations(self) -> list[Event]:
        """Every rule violation (tb_gradscope.format.Event) seen so far.

        Those the FlowGraph shows are here as soon as the recorder is built
        (stamped with the first train call's step once it runs).
        """
        return list(self._rules.violations)

    def flush(self) -> None:
        """Writes pending records to disk."""
        self._writer.flush()

    def close(self, session: Any = None) -> None:
        """Closes an open update window (with `session`, if still usable) and the file.

        Steps not checked yet are checked now; under on_violation="raise" their
        violations raise FlowRuleViolation after the file is closed.
        """
        if session is not None and not self.disabled:
            self._guard(lambda: self._close_open_window(session.run))
        if not self.disabled:
            self._guard(lambda: self._write_violations(self._rules.remaining()))
        self._writer.close()
        self._settle()

    # The protocol RecordingSession and GradscopeHook drive, one call each side
    # of the user's run call. Failures are reported once and switch recording off.

    def _before(self, run: Run, fetches: Any, feed_dict: Any) -> _Pending | None:
        """What the call records, or None when it records nothing and needs no
        `_after` (most calls: this path is kept to a few dict lookups)."""
        if self._unsettled:
            self._settle()  # violations of a call that failed before its _after
        if self.disabled:
            return None
        called = self._guard(lambda: self._called(run, fetches))
        if self._unsettled:
            self._settle()  # the FlowGraph's violations: before the first step runs
        if not called or self.disabled:
            return None
        step = self._clock.quiet(called)
        if step is not None and (self._pairs is None or self._pairs.idle_at(step)):
            self._clock.skip(called)
            return None
        pending = self._guard(lambda: self._plan_call(run, called, feed_dict))
        if pending is None or (
            not pending.fetches and pending.plan.close_after is None and not self._unsettled
        ):
            return None
        return pending

    def _after(self, run: Run, pending: _Pending, results: Mapping[str, Any]) -> None:
        if not self.disabled:
            self._guard(lambda: self._finish_call(run, pending, results))
        self._settle()

    def _settle(self) -> None:
        """Applies on_violation to the violations written since the last call."""
        events, self._unsettled = self._unsettled, []
        self._rules.apply_policy(events)

    def _owns(self, error: tf.errors.OpError) -> bool:
        """True when a failed run call failed in one of gradscope's ops."""
        node = getattr(error, "node_def", None)
        name = getattr(node, "name", "") or getattr(getattr(error, "op", None), "name", "")
        return bool(name) and name.startswith(NAME_SCOPE + "/")

    def _recover(self, run: Run, pending: _Pending, error: tf.errors.OpError) -> Any:
        """After a run call failed in gradscope's ops: what to run instead.

        Returns the op to put in place of the call's train ops, or None to run
        the user's call again unchanged. A failed call may have applied the
        update before failing; running it again would apply it twice. When the
        call opened the update window the snapshot taken just before it tells
        whether the train ops already wrote their variables; otherwise the
        update is assumed applied and not repeated.
        """
        where = error.node_def.name if error.node_def is not None else "?"
        applied = True
        if pending.plan.snapshot:
            changed = self._guard(
                lambda: run([self._update_ops.changed[n] for n in sorted(pending.called)])
            )
            applied = changed is None or any(bool(c) for c in changed)
        outcome = (
            "that call's update had already been applied and was not repeated"
            if applied
            else "that call had not applied its update and was run again without gradscope"
        )
        self._disable(f"{type(error).__name__} in {where}: {_error_text(error)}; {outcome}")
        return self._noop if applied else None

    def _disable(self, reason: Any) -> None:
        self.disabled = True
        warn_once(
            ("tf1_recorder_disabled", self._serial),
            f"tb_gradscope: recording into '{self.logdir}' stopped ({reason}); "
            "training continues unaffected. Records written so far are kept.",
        )

    def _guard(self, action: Callable[[], Any]) -> Any:
        try:
            return action()
        except Exception as e:  # noqa: BLE001 - the training loop must survive us
            text = _error_text(e) if isinstance(e, tf.errors.OpError) else str(e)
            self._disable(f"{type(e).__name__}: {text}")
            return None

    def _called(self, run: Run, fetches: Any) -> frozenset[str]:
        """The train ops a call runs; the first such call writes the FlowGraph."""
        called = self._called_ops(fetches)
        if called and not self._offset_read:
            self._read_offset(run)
            self._write_flowgraph(self._first_step)
        return called

    def _plan_call(self, run: Run, called: set[str], feed_dict: Any) -> _Pending | None:
        fed: set | None = None

        def fed_now() -> set:
            nonlocal fed
            if fed is None:
                fed = graphs.fed_ops(self.graph, feed_dict)
            return fed

        def can_record(loss: str) -> bool:  # asked only at recorded steps
            return self._loss_ops[loss].placeholders <= fed_now()

        plan = self._clock.plan(called, can_record)
        for close in plan.closes:
            self._close_window(run, close)
        if plan.pause is not None:
            slot = self._update_ops.slots[plan.pause.slot]
            self._fixed.run(run, slot.first if plan.pause.first else slot.more)
        if self._pairs is not None:
            self._pairs.before_step(run, plan.step, self._writer.write_table)
            if not self._clock.has_open_window and plan.close_after is None:
                self._writer.flush()  # a pair's table at a step no window closes
        if plan.snapshot:
            self._fixed.run(run, self._update_ops.snapshot)
        refresh = next(
            (
                self._loss_ops[loss].refresh
                for loss in plan.losses
                if self._loss_ops[loss].refresh is not None
            ),
            None,
        )
        if refresh is not None:
            self._fixed.run(run, refresh)  # reference variables, read before the call applies
        fetches: dict = {loss: self._loss_ops[loss].table for loss in plan.losses}
        for name, step in self._due_conflicts(plan, can_fetch=lambda ph: ph <= fed_now()):
            fetches[(Kind.CONFLICT, name)] = self._conflicts[name].table
            self._conflict_steps[name] = step
        return _Pending(plan, fetches, frozenset(called))

    def _due_conflicts(
        self, plan: CallPlan, can_fetch: Callable[[frozenset], bool]
    ) -> list[tuple[str, int]]:
        """(pair, step) of the conflicts this call fetches: at the step of one of
        its losses recorded here, once per step, when the call feeds the rest."""
        due = []
        for name, c in self._conflicts.items():
            steps = [plan.losses[loss] for loss in c.losses if loss in plan.losses]
            if not steps or self._conflict_steps.get(name) == steps[0]:
                continue
            if can_fetch(c.placeholders):
                due.append((name, steps[0]))
        return due

    def _finish_call(self, run: Run, pending: _Pending, results: Mapping[str, Any]) -> None:
        for loss, step in pending.plan.losses.items():
            self._writer.write_table(self._infos[loss], results[loss], step)
            self._rules.add_grads(step, loss, results[loss])
        for key in pending.fetches:
            if isinstance(key, tuple):  # (Kind.CONFLICT, pair)
                name = key[1]
                self._writer.write_table(
                    self._conflict_infos[name], results[key], self._conflict_steps[name]
                )
        if pending.plan.close_after is not None:
            self._close_window(run, pending.plan.close_after)

    def _close_window(self, run: Run, close: Close) -> None:
        step = close.step
        if close.early:
            warn_once(
                ("tf1_window_closed_early", self._serial),
                f"tb_gradscope: '{self.logdir}': step {step}'s update is recorded before every "
                f"train op ran at that step: more than {PAUSED_WINDOWS} recorded steps waited for "
                "a train op at once (train ops in blocks longer than every_n_steps, or one op "
                "run less often than the others); the scopes written by the train ops still to "
                "run at such a step read ||delta theta|| NaN, not measured. Raise every_n_steps "
                "to record fewer steps at once.",
            )
        if close.slot is None:
            fetch = self._update_ops.table
        else:
            slot = self._update_ops.slots[close.slot]
            fetch = slot.running if close.running else slot.paused
        table = self._fixed.run(run, fetch)
        unmeasured = sorted({r for op in close.unmeasured for r in self._rows_of_op.get(op, ())})
        if unmeasured and table is not None:
            table = np.array(table, copy=True)
            table[unmeasured, self._update_info.columns.index("update_norm")] = np.nan
        self._writer.write_table(self._update_info, table, step)
        self._write_violations(self._rules.at_step(step, table))
        self._writer.flush()  # a recorded step is on disk when training moves on

    def _write_violations(
        self, events_by_step: Mapping[int, list[Event]], name: str = STEP_EVENTS
    ) -> None:
        written = self._rules.write(self._writer.write_blobs, events_by_step, name)
        if written:
            self._writer.flush()
            self._unsettled.extend(written)

    def _close_open_window(self, run: Run) -> None:
        for close in self._clock.close():
            self._close_window(run, close)

    def _read_offset(self, run: Run) -> None:
        self._offset_read = True
        if self._global_step is not None:
            self._first_step = int(run(self._global_step))
            self._clock.set_offset(self._first_step)

    def _write_flowgraph(self, step: int) -> None:
        """The FlowGraph (with the rule texts) and its violations, at the first train call."""
        if self._flowgraph is None or self._flowgraph_written:
            return
        self._flowgraph_written = True
        info = make_info(Kind.FLOWGRAPH, attrs=self._rules.flowgraph_attrs)
        self._writer.write_blobs(info, [self._flowgraph.to_json()], step)
        events = self._rules.trace_events_at(step)
        self._write_violations({step: events} if events else {}, TRACE_EVENTS)
        self._writer.flush()


def _error_text(error: tf.errors.OpError) -> str:
    """The line of a TF error message that says what went wrong."""
    skip = ("Graph execution error", "Detected at node", "File ", "Node:", "[[")
    lines = [line.strip() for line in (error.message or "").splitlines()]
    useful = [line for line in lines if line and not line.startswith(skip)]
    return useful[-1] if useful else type(error).__name__


def _default_variables(graph: tf.Graph, pairs: Sequence[Any]) -> list[tf.Variable]:
    """The graph's trainable variables, then the paired ones not among them."""
    with graph.as_default():
        chosen = list(tf.compat.v1.trainable_variables())
    known = {v.op for v in chosen}
    for var in paired_variables(pairs, graph):
        if var.op not in known:
            known.add(var.op)
            chosen.append(var)
    return chosen
