"""The ops the TF1 integration adds to the user's graph.

Built once, under the `tb_gradscope/` name scope, before the graph is finalized.
None of them runs unless fetched: the per-loss gradient tables ride along with
the user's own `Session.run` at recorded steps, the snapshot and update-norm
ops run in two small calls around it. The snapshot variable lives only in the
collection `SNAPSHOT_COLLECTION`, so the user's `Saver`,
`global_variables_initializer` and `MonitoredTrainingSession` readiness checks
never see it; an assign initializes it, so it needs no initializer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import tensorflow as tf

from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS
from tb_gradscope.integrations.tf1 import _ref_reads as ref_reads
from tb_gradscope.integrations.tf1 import _reuse as reuse
from tb_gradscope.integrations.tf1._graph import required_placeholders, written_variables
from tb_gradscope.record import _conflict as conflict_lib
from tb_gradscope.record import _stats as stats
from tb_gradscope.record._reductions import Segments
from tb_gradscope.record._stats import RollUp
from tb_gradscope.scopes import ScopeLayout

NAME_SCOPE = "tb_gradscope"
SNAPSHOT_COLLECTION = "tb_gradscope_snapshots"


@dataclasses.dataclass(frozen=True)
class LossOps:
    """The gradient table of one loss and the placeholders it needs fed.

    `reused` names the variables whose gradient is the one the loss's train op
    applies (proved equal to the recorder's own, see `reuse.py`). `refresh`,
    when set, must run just before any call fetching `table`: the table reads
    reference variables through that copy (`ref_reads.py`).
    """

    table: tf.Tensor
    placeholders: frozenset
    reused: frozenset = frozenset()
    refresh: tf.Operation | None = None
    grads: tuple = ()  # the loss's own gradients, aligned with the variables (None: no path)


@dataclasses.dataclass(frozen=True)
class ConflictOps:
    """The CONFLICT table of two losses: the cosine of their gradients per scope
    both reach (`scopes`), and the placeholders it needs fed."""

    losses: tuple[str, str]
    scopes: tuple[str, ...]
    table: tf.Tensor
    placeholders: frozenset


@dataclasses.dataclass(frozen=True)
class Slot:
    """One accumulator of a paused update window (`steps.py`): `first` sets it
    to theta_now - snapshot, `more` adds that; `running` is the UPDATE_STATS
    table of accumulator + (theta_now - snapshot), `paused` of the accumulator."""

    first: tf.Operation
    more: tf.Operation
    running: tf.Tensor
    paused: tf.Tensor


@dataclasses.dataclass(frozen=True)
class UpdateOps:
    """Snapshot of the scoped variables and ||theta_now - snapshot|| per scope.

    `changed[train_op_name]` is true when a variable that train op updates
    differs from its snapshot: it tells, after a failed run call, whether the
    user's update was already applied. `slots` accumulate the update of a
    window paused by calls of other steps (train ops in blocks).
    """

    snapshot: tf.Operation
    table: tf.Tensor
    changed: Mapping[str, tf.Tensor]
    slots: Sequence[Slot] = ()


def build_loss_ops(
    graph: tf.Graph,
    starts: Mapping[str, tuple[tf.Tensor, tf.Tensor | None]],
    variables: Sequence[tf.Variable],
    rollup: RollUp,
    train_ops: Mapping[str, tf.Operation | None],
    columns: Sequence[str] = OPTIONAL_GRAD_COLUMNS,
) -> dict[str, LossOps]:
    """Per loss, the GRAD_STATS table of d(loss)/d(variables).

    `starts` maps a loss name to (tensor, grad_ys): a scalar loss has grad_ys
    None; a gradient start point (DQN 3.0, DDPG actor) passes the output
    gradients it is differentiated with, exactly as `tf.gradients` takes them.
    Where the loss's train op (`train_ops[name]`) provably applies that very
    gradient, the table reads the train op's tensor instead of computing it
    again (`reuse.py`); the own gradient ops stay in the graph, unfetched.
    `columns`: the optional GRAD_STATS columns recorded.
    """
    own: dict[str, list] = {}
    built: dict[str, list[tf.Operation]] = {}
    with graph.as_default():
        for name, (ys, grad_ys) in starts.items():
            first = len(graph.get_operations())
            with tf.name_scope(f"{NAME_SCOPE}/grads/{_op_safe(name)}"):
                own[name] = (
                    tf.compat.v1.gradients(ys, list(variables), grad_ys=grad_ys)
                    if variables
                    else []
                )
            built[name] = graph.get_operations()[first:]
        refresh, rewired = ref_reads.rewire(
            graph, [op for ops_ in built.values() for op in ops_], f"{NAME_SCOPE}/ref_reads"
        )
        ops = {}
        for name, grads in own.items():
            with tf.name_scope(f"{NAME_SCOPE}/grads/{_op_safe(name)}"):
                train_op = train_ops.get(name)
                used = (
                    reuse.reusable(grads, variables, reuse.applied_gradients(train_op))
                    if train_op is not None
                    else grads
                )
                table = stats.grad_table(used, rollup, columns)
            reused = frozenset(
                v.name for v, mine, g in zip(variables, grads, used) if g is not mine
            )
            needs = refresh if rewired.intersection(built[name]) else None
            ops[name] = LossOps(table, required_placeholders([table]), reused, needs, tuple(grads))
    return ops


def build_conflict_ops(
    graph: tf.Graph, loss_ops: Mapping[str, LossOps], layout: ScopeLayout, rollup: RollUp
) -> dict[str, ConflictOps]:
    """{"a|b": ConflictOps} for every pair of losses reaching a scope together,
    from the losses' own gradients (`record._conflict`'s kernel, as TF2's):
    fetched with the first call recording one of them at a step whose feed
    also serves the other, so both are taken at one state. Losses reading
    reference variables through a refreshed copy are left out."""
    grads = {n: list(o.grads) for n, o in loss_ops.items() if o.refresh is None and o.grads}
    if len(grads) < 2:
        return {}
    out = {}
    with graph.as_default(), tf.name_scope(f"{NAME_SCOPE}/conflict"):
        for (a, b), (rows, make) in conflict_lib.conflict_tables(grads, layout, rollup).items():
            table = make()
            out[conflict_lib.pair_name(a, b)] = ConflictOps(
                (a, b),
                tuple(layout.scopes[r] for r in rows),
                table,
                required_placeholders([table]),  # the Gram behind it reads every loss
            )
    return out


def build_update_ops(
    graph: tf.Graph,
    variables: Sequence[tf.Variable],
    rollup: RollUp,
    train_ops: Sequence[tf.Operation],
    slots: int = 0,
) -> UpdateOps:
    """One flat snapshot variable of `variables`, the UPDATE_STATS table against
    it, and `slots` accumulators for paused windows (each allocated only when
    first used: `first` assigns it without reading it)."""
    with graph.as_default(), tf.name_scope(f"{NAME_SCOPE}/updates"):
        # One read of every variable, flattened once, evaluated anew by each
        # run call that fetches it: before the step by `snapshot`, after it by `table`.
        now = Segments(variables)
        dtype = now.dtype
        shapes = [tf.TensorShape(v.shape) for v in variables]
        known = all(s.is_fully_defined() for s in shapes)
        size = sum(s.num_elements() for s in shapes) if known else 0
        snap = _flat_variable(size, dtype, known, "snapshot")
        snapshot = snap.assign(now.flat, read_value=False)
        delta = now.flat - snap.value()
        table = stats.update_table_of(stats.update_sums(now, delta), rollup)

        def delta_table(moved: tf.Tensor) -> tf.Tensor:
            return stats.update_table_of(stats.update_sums(now, moved), rollup)

        accumulators = []
        for i in range(slots):
            acc = _flat_variable(size, dtype, known, f"paused_{i}")
            accumulators.append(
                Slot(
                    first=acc.assign(delta, read_value=False),
                    more=acc.assign_add(delta, read_value=False),
                    running=delta_table(acc.value() + delta),
                    paused=delta_table(acc.value()),
                )
            )
        changed_elements = stats.changed_counts(now, snap.value())
        index = {v.op: i for i, v in enumerate(variables)}
        changed = {}
        for op in train_ops:
            written = [index[v.op] for v in written_variables(op, variables)]
            changed[op.name] = (
                tf.reduce_any(tf.gather(changed_elements, written) > 0)
                if written
                else tf.constant(False)
            )
    return UpdateOps(snapshot, table, changed, tuple(accumulators))


def rows_written(
    layout: ScopeLayout, variables: Sequence[tf.Variable], train_ops: Sequence[tf.Operation]
) -> dict[str, tuple[int, ...]]:
    """{train op name: the UPDATE rows holding a variable it writes}: the rows
    whose update is not measured when a window closes before that op ran."""
    index = {v.op: i for i, v in enumerate(variables)}
    out = {}
    for op in train_ops:
        written = {index[v.op] for v in written_variables(op, variables)}
        out[op.name] = tuple(
            row for row, members in enumerate(layout.members) if written.intersection(members)
        )
    return out


def _flat_variable(size: int, dtype: tf.DType, known: bool, name: str) -> tf.Variable:
    """A flat resource variable outside every collection the user's code sees."""
    return tf.compat.v1.Variable(
        tf.zeros([size], dtype),
        trainable=False,
        collections=[SNAPSHOT_COLLECTION],
        validate_shape=known,
        shape=[size] if known else tf.TensorShape([None]),
        name=name,
        use_resource=True,
    )


def _op_safe(name: str) -> str:
    """A loss name usable in a TF name scope (which rejects most punctuation)."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
    return safe if safe and safe[0].isalnum() else f"loss_{safe}"
