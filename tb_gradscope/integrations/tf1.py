"""Record TF1 graph-mode training (`tf.compat.v1.Session`, MonitoredTrainingSession).

    gs = GraphRecorder(logdir, losses={"loss1": loss1, "loss2": loss2},
                       train_ops={"loss1": train1, "loss2": train2})
    sess = gs.wrap(sess)            # or: hooks=[gs.hook()]

`GraphRecorder` adds stats ops to the user's graph (per loss: `tf.gradients`
of the loss with respect to the scoped variables, rolled up to a GRAD_STATS
table; they run only when fetched) and runs the static analysis once. At a
recorded step the gradient tables are fetched in the user's own run call (no
second forward pass) and written with TensorBoard's event writer; the graph
gets no summary ops. See `_steps.py` for what a step is.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Mapping, Sequence

import tensorflow as tf

from tb_gradscope.format import Kind, make_info
from tb_gradscope.integrations import _tf1_graph as graphs
from tb_gradscope.integrations._steps import CallPlan, StepClock
from tb_gradscope.integrations._tf1_ops import (
    NAME_SCOPE,
    build_loss_ops,
    build_update_ops,
)
from tb_gradscope.integrations._tf1_pairs import PairRecorder, resolve_pairs
from tb_gradscope.integrations._tf1_static import static_flowgraph
from tb_gradscope.integrations._writer import RecordWriter
from tb_gradscope.record.losses import StartPoint
from tb_gradscope.record.stats import RollUp
from tb_gradscope.record.warn import warn_once
from tb_gradscope.scopes import ScopeSpec, build_layout, variable_name

Run = Callable[..., Any]
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
        trainable variables). Optimizer slots and the global step never are.
      scopes: include/exclude patterns and depth cap for the scope tree.
      pairs: target/online pairs whose drift is recorded (DRIFT records):
        {target scope: online scope}, or a list of `tb_gradscope.pairs.Pair`
        (`pair_prefixes(tf.trainable_variables(), "target_net", "eval_net",
        every=C)` declares a hard-replacement period). See `_tf1_pairs.py`.
      analyze: run the static analysis and write the FlowGraph.

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
    ):
        if not losses:
            raise ValueError("GraphRecorder needs at least one loss: losses={'td': loss}")
        graph = _graph_of(losses)
        self.graph = graph
        self._starts = {
            str(name): _resolve_start(graph, name, value) for name, value in losses.items()
        }
        self._train_ops = _resolve_train_ops(graph, self._starts, train_ops)
        self._clock = StepClock(
            {loss: (op.name if op is not None else None) for loss, op in self._train_ops.items()},
            every_n_steps,
        )
        trained = sorted({op for op in self._train_ops.values() if op is not None},
                         key=lambda op: op.name)
        chosen = graphs.scoped_variables(graph, variables)
        self.layout = build_layout([v.name for v in chosen], scopes)
        by_name = {variable_name(v.name): v for v in chosen}
        self.variables = [by_name[n] for n in self.layout.variable_names]
        self._flowgraph = (
            static_flowgraph(graph, self._starts, self.variables, self.layout, self._train_ops)
            if analyze
            else None
        )
        rollup = RollUp.from_layout(self.layout)
        self._loss_ops = build_loss_ops(graph, self._starts, self.variables, rollup)
        self._update_ops = build_update_ops(graph, self.variables, rollup, trained)
        self._pairs = (
            PairRecorder(graph, resolve_pairs(pairs, self.variables), trained, every_n_steps)
            if pairs
            else None
        )
        with graph.as_default():
            self._noop = tf.no_op(name=f"{NAME_SCOPE}/skipped_train_op")
        self._train_op_names = {op: op.name for op in trained}
        self._global_step = tf.compat.v1.train.get_global_step(graph)
        self._offset_read = False
        self._flowgraph_written = False
        self._infos = {
            name: make_info(Kind.GRAD_STATS, name, self.layout.scopes)
            for name in self._starts
        }
        self._update_info = make_info(Kind.UPDATE_STATS, "", self.layout.scopes)
        self._writer = RecordWriter(logdir)
        self.logdir = logdir
        self.disabled = False
        self._serial = next(_SERIALS)

    def wrap(self, session: Any) -> "RecordingSession":
        """A session whose `run()` also records; everything else is `session`'s."""
        from tb_gradscope.integrations._tf1_session import RecordingSession

        return RecordingSession(session, self)

    def hook(self) -> tf.compat.v1.train.SessionRunHook:
        """A SessionRunHook recording into this recorder (MonitoredTrainingSession)."""
        from tb_gradscope.integrations._tf1_session import GradscopeHook

        return GradscopeHook(self)

    def flush(self) -> None:
        """Writes pending records to disk."""
        self._writer.flush()

    def close(self, session: Any = None) -> None:
        """Closes an open update window (with `session`, if still usable) and the file."""
        if session is not None and not self.disabled:
            self._guard(lambda: self._close_open_window(session.run))
        self._writer.close()

    # The protocol RecordingSession and GradscopeHook drive, one call each side
    # of the user's run call. Failures are reported once and switch recording off.

    def _before(self, run: Run, fetches: Any, feed_dict: Any) -> _Pending | None:
        if self.disabled:
            return None
        return self._guard(lambda: self._plan_call(run, fetches, feed_dict))

    def _after(self, run: Run, pending: _Pending, results: Mapping[str, Any]) -> None:
        if not self.disabled:
            self._guard(lambda: self._finish_call(run, pending, results))

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
        if pending.plan.open_step is not None:
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

    def _plan_call(self, run: Run, fetches: Any, feed_dict: Any) -> _Pending | None:
        named = self._train_op_names  # {op: name}; op.name is a C call, avoid it per run
        called = {named[op] for op in graphs.fetched_ops(self.graph, fetches) if op in named}
        if not called:
            return None
        if not self._offset_read:
            self._read_offset(run)
        fed: set | None = None

        def can_record(loss: str) -> bool:  # asked only at recorded steps
            nonlocal fed
            if fed is None:
                fed = graphs.fed_ops(self.graph, feed_dict)
            return self._loss_ops[loss].placeholders <= fed

        plan = self._clock.plan(called, can_record)
        if plan.close_before is not None:
            self._close_window(run, plan.close_before)
        if self._pairs is not None:
            self._pairs.before_step(run, plan.step, self._writer.write_table)
        if plan.open_step is not None:
            run(self._update_ops.snapshot)
            self._write_flowgraph(plan.open_step)
        fetches = {loss: self._loss_ops[loss].table for loss in plan.losses}
        return _Pending(plan, fetches, frozenset(called))

    def _finish_call(self, run: Run, pending: _Pending, results: Mapping[str, Any]) -> None:
        for loss, step in pending.plan.losses.items():
            self._writer.write_table(self._infos[loss], results[loss], step)
        if pending.plan.close_after is not None:
            self._close_window(run, pending.plan.close_after)

    def _close_window(self, run: Run, step: int) -> None:
        table = run(self._update_ops.table)
        self._writer.write_table(self._update_info, table, step)
        self._writer.flush()  # a recorded step is on disk when training moves on

    def _close_open_window(self, run: Run) -> None:
        step = self._clock.close()
        if step is not None:
            self._close_window(run, step)

    def _read_offset(self, run: Run) -> None:
        self._offset_read = True
        if self._global_step is not None:
            self._clock.set_offset(int(run(self._global_step)))

    def _write_flowgraph(self, step: int) -> None:
        if self._flowgraph is None or self._flowgraph_written:
            return
        self._flowgraph_written = True
        info = make_info(Kind.FLOWGRAPH)
        self._writer.write_blobs(info, [self._flowgraph.to_json()], step)


def _error_text(error: tf.errors.OpError) -> str:
    """The line of a TF error message that says what went wrong."""
    skip = ("Graph execution error", "Detected at node", "File ", "Node:", "[[")
    lines = [line.strip() for line in (error.message or "").splitlines()]
    useful = [line for line in lines if line and not line.startswith(skip)]
    return useful[-1] if useful else type(error).__name__


def _graph_of(losses: Mapping[str, Any]) -> tf.Graph:
    for value in losses.values():
        tensor = value.tensor if isinstance(value, StartPoint) else value
        if isinstance(tensor, tf.Tensor):
            return tensor.graph
    return tf.compat.v1.get_default_graph()


def _resolve_start(graph: tf.Graph, name: Any, value: Any) -> tuple[tf.Tensor, Any]:
    if isinstance(value, StartPoint):
        tensor = graphs.as_tensor(graph, value.tensor, f"start point '{name}'")
        grad_ys = value.output_gradients
        if grad_ys is not None:
            grad_ys = graphs.as_tensor(graph, grad_ys, f"output_gradients of '{name}'")
            if not grad_ys.shape.is_compatible_with(tensor.shape):
                raise ValueError(
                    f"start point '{name}': output_gradients have shape "
                    f"{grad_ys.shape}, the tensor has shape {tensor.shape}; pass "
                    "one gradient per element, as tf.gradients(..., grad_ys=) needs"
                )
        return tensor, grad_ys
    tensor = graphs.as_tensor(graph, value, f"loss '{name}'")
    if not tensor.dtype.is_floating:
        raise ValueError(
            f"loss '{name}' has dtype {tensor.dtype.name}; pass a floating-point loss"
        )
    if tensor.shape.rank not in (None, 0):
        raise ValueError(
            f"loss '{name}' is not a scalar (shape {tensor.shape}); pass "
            "tf.reduce_mean(...) of it, or StartPoint(tensor, output_gradients=g) to "
            "start the gradient from it with explicit output gradients"
        )
    return tensor, None


def _resolve_train_ops(
    graph: tf.Graph, starts: Mapping[str, Any], train_ops: Mapping[str, Any]
) -> dict[str, tf.Operation | None]:
    if not train_ops:
        raise ValueError(
            "GraphRecorder needs train_ops: name the op that trains each loss, "
            "e.g. train_ops={'td': train_op}; steps are counted in runs of them"
        )
    unknown = sorted(set(map(str, train_ops)) - set(starts))
    if unknown:
        raise ValueError(
            f"train_ops names {unknown}, which are not losses ({sorted(starts)}); "
            "key train_ops by the loss each op trains"
        )
    return {
        loss: (
            graphs.as_operation(graph, train_ops[loss], f"train op of loss '{loss}'")
            if loss in train_ops
            else None
        )
        for loss in starts
    }


__all__ = ["GraphRecorder", "StartPoint"]
