"""One step's loss tables computed together: per-loss GRAD_STATS and pair CONFLICT.

Used when something needs the tables as tensors rather than only written:
gradient conflict (needs two losses' gradients at once) and rules checked at
recorded steps (need the tables on the host). Everything is computed, and
written when a writer is given, in one `tf.cond` on the recorded-step predicate
(`writing.recorded_only`), so an unrecorded step costs one branch op that returns
zeros; eagerly, nothing runs at unrecorded steps.

Which scopes a conflict table has depends on which gradients are None, known
only once the recorded branch is traced; the unrecorded branch (traced after
it, as `tf.cond` does) returns zeros of the same shapes.

Eager callers get each kernel traced once per kind of input (`EagerKernels`)
instead of hundreds of eager ops per recorded step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope.format.metadata import KIND_SPECS, OPTIONAL_GRAD_COLUMNS, Kind
from tb_gradscope.record import _conflict as conflict_lib
from tb_gradscope.record import _stats as stats
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._writing import recorded_only
from tb_gradscope.scopes import ScopeLayout


@dataclasses.dataclass(frozen=True)
class StepTable:
    """A table of the step: its rows (scopes), metadata attrs, and value."""

    kind: Kind
    name: str
    scopes: tuple[str, ...]
    attrs: Mapping[str, Any]
    value: tf.Tensor


def recorded_tables(
    record: tf.Tensor,
    make_aligned: Callable[[], Mapping[str, Sequence[Any]]],
    layout: ScopeLayout,
    rollup: stats.RollUp,
    conflict: bool,
    write: Callable[[list[StepTable]], Any] | None = None,
    snapshot: Sequence[Any] = (),
    kernels: EagerKernels | None = None,
    columns: Sequence[str] = OPTIONAL_GRAD_COLUMNS,
    *,
    ctx: ExecutionContext,
) -> tuple[list[StepTable], list[tf.Tensor]]:
    """GRAD_STATS per loss and (if `conflict`, with >= 2 losses) CONFLICT per pair,
    and the values of the `snapshot` variables read in the same branch.

    `make_aligned()` returns {loss: gradients aligned with the layout's
    variables}; it is called only on the recorded branch, and so is
    `write(tables)` when given (the writes then share the branch). At
    unrecorded steps the snapshot values are empty tensors; eagerly, both
    lists are [] when `record` is false. `kernels`: the recorder's, for eager
    callers. `columns`: the optional GRAD_STATS columns recorded. `ctx`: the
    calling recorder call's.
    """
    shapes: dict[tuple[Kind, str], tuple[tuple[str, ...], dict]] = {}

    def compute() -> tuple[dict[tuple[str, str], tf.Tensor], list[tf.Tensor]]:
        aligned = make_aligned()
        for loss in aligned:
            shapes[(Kind.GRAD_STATS, loss)] = (tuple(layout.scopes), {})
        if conflict and len(aligned) > 1:
            for (a, b), (rows, _) in conflict_lib.conflict_tables(aligned, layout, rollup).items():
                shapes[(Kind.CONFLICT, conflict_lib.pair_name(a, b))] = (
                    tuple(layout.scopes[r] for r in rows),
                    {"losses": [a, b]},
                )
        out = (
            _tables(aligned, layout, rollup, conflict, columns)
            if kernels is None
            else kernels.tables(aligned, layout, rollup, conflict, columns, ctx)
        )
        if write is not None:
            write([_table(kind, name, out[(kind.value, name)]) for kind, name in shapes])
        return out, stats.snapshot(snapshot)

    def _table(kind: Kind, name: str, value: tf.Tensor) -> StepTable:
        scopes, attrs = shapes[(kind, name)]
        return StepTable(kind, name, scopes, attrs, value)

    def skip() -> tuple[dict[tuple[str, str], tf.Tensor], list[tf.Tensor]]:
        tables = {
            (kind.value, name): tf.zeros([len(scopes), len(KIND_SPECS[kind].columns)], tf.float32)
            for (kind, name), (scopes, _) in shapes.items()
        }
        empty: dict[tf.DType, tf.Tensor] = {}  # one empty tensor per dtype, not one per variable
        for v in snapshot:
            if v.dtype not in empty:
                empty[v.dtype] = tf.zeros([0], v.dtype)
        return tables, [empty[v.dtype] for v in snapshot]

    if ctx.eager:
        if not bool(record):
            return [], []
        values, copies = compute()
    else:
        values, copies = recorded_only(record, compute, skip)
    return [_table(kind, name, values[(kind.value, name)]) for kind, name in shapes], list(copies)


def _tables(
    aligned: Mapping[str, Sequence[Any]],
    layout: ScopeLayout,
    rollup: stats.RollUp,
    conflict: bool,
    columns: Sequence[str],
) -> dict[tuple[str, str], tf.Tensor]:
    """{(kind, name): table}: GRAD_STATS per loss (with the optional `columns`),
    then CONFLICT per pair of losses sharing a scope."""
    out = {}
    for loss, grads in aligned.items():
        out[(Kind.GRAD_STATS.value, loss)] = stats.grad_table(grads, rollup, columns)
    if conflict and len(aligned) > 1:
        for (a, b), (_, make) in conflict_lib.conflict_tables(aligned, layout, rollup).items():
            out[(Kind.CONFLICT.value, conflict_lib.pair_name(a, b))] = make()
    return out


class EagerKernels:
    """A recorder's table kernels for eager callers, each a function traced
    once per kind of input: op by op, a recorded step's tables are hundreds of
    eager ops (two losses' tables and their conflict ~300, ~15 ms of CPU; the
    update table ~40, ~2 ms). Kept by the recorder, so they go with it."""

    def __init__(self) -> None:
        self._traced: dict[tuple, Callable] = {}

    def tables(
        self,
        aligned: Mapping[str, Sequence[Any]],
        layout: ScopeLayout,
        rollup: stats.RollUp,
        conflict: bool,
        columns: Sequence[str],
        ctx: ExecutionContext,
    ) -> dict[tuple[str, str], tf.Tensor]:
        """`_tables`; eagerly, as one call of a traced function."""
        if not ctx.eager:
            return _tables(aligned, layout, rollup, conflict, columns)
        key = (
            "tables",
            id(rollup),
            id(layout),
            conflict,
            tuple(columns),
            tuple((loss, _kinds(grads)) for loss, grads in aligned.items()),
        )
        tables = self._traced_once(
            key, lambda given: _tables(given, layout, rollup, conflict, columns)
        )
        return tables({loss: list(grads) for loss, grads in aligned.items()})

    def update_table(
        self,
        before: Sequence[tf.Tensor | None],
        variables: Sequence[Any],
        rollup: stats.RollUp,
        ctx: ExecutionContext,
    ) -> tf.Tensor:
        """`stats.update_table`; eagerly, as one call of a traced function."""
        if not ctx.eager:
            return stats.update_table(before, variables, rollup)
        key = ("update", id(rollup), tuple(id(v) for v in variables), _kinds(before))
        return self._traced_once(key, lambda old: stats.update_table(old, variables, rollup))(
            list(before)
        )

    def _traced_once(self, key: tuple, kernel: Callable) -> Callable:
        if key not in self._traced:
            self._traced[key] = tf.function(kernel, autograph=False, reduce_retracing=True)
        return self._traced[key]


def _kinds(values: Sequence[Any]) -> tuple:
    """What a list of gradients (or values) holds, per entry: None or its type."""
    return tuple(None if v is None else type(v).__name__ for v in values)
