"""Drift of target/online pairs in a TF1 graph (DRIFT records).

Reuses the pairs package's in-graph kernel (`tb_gradscope.pairs.drift`); this
module only builds its ops in the user's graph and decides, per step, which
small run calls to make. A pair's step s is recorded when s % every_n_steps == 0
or s % pair.every == 0 (so hard-copy steps are seen). Drift is read just before
the step's first train call, i.e. after whatever target update the loop ran
for that step (a hard replacement before `sess.run(train_op)` shows as drift
exactly 0). A snapshot of both sides is taken at step s - 1 of a recorded step
s, which makes `target_step` and `tau` exact; without it they are NaN.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from tb_gradscope.format import Kind, RecordInfo, make_info
from tb_gradscope.integrations._tf1_graph import written_variables
from tb_gradscope.integrations._tf1_ops import NAME_SCOPE, SNAPSHOT_COLLECTION
from tb_gradscope.pairs import drift as drift_lib
from tb_gradscope.pairs.pairs import Pair, pair_prefixes
from tb_gradscope.pairs.series import DRIFT_COLUMNS
from tb_gradscope.record.stats import RollUp


@dataclasses.dataclass(frozen=True)
class _PairOps:
    pair: Pair
    info: RecordInfo
    table: tf.Tensor
    snapshot: tf.Operation  # runs after `table` is read
    copies: tuple[tf.Variable, ...]  # the flat snapshots of both sides
    have_previous: tf.Tensor  # placeholder: feed True when the snapshot is of s - 1


def resolve_pairs(pairs: Any, variables: Sequence[tf.Variable]) -> list[Pair]:
    """Pairs given as `Pair`s or as {target scope: online scope} over `variables`."""
    if not pairs:
        return []
    if isinstance(pairs, Mapping):
        return [pair_prefixes(list(variables), target=t, online=o) for t, o in pairs.items()]
    pairs = list(pairs)
    if not all(isinstance(p, Pair) for p in pairs):
        raise ValueError(
            "pairs takes {target_scope: online_scope} or a list of Pair from "
            "tb_gradscope.pairs (pair_prefixes(tf.trainable_variables(), "
            "target='target_net', online='eval_net', every=C))"
        )
    return pairs


class PairRecorder:
    """Builds each pair's DRIFT ops and runs them at the pair's steps."""

    def __init__(self, graph: tf.Graph, pairs: Sequence[Pair],
                 train_ops: Sequence[tf.Operation], every_n_steps: int):
        self._every = every_n_steps
        self._ops = [self._build(graph, i, p, train_ops) for i, p in enumerate(pairs)]
        with graph.as_default():
            self._init = tf.compat.v1.variables_initializer(
                [v for ops in self._ops for v in ops.copies], name=f"{NAME_SCOPE}/pairs_init"
            )
        self._initialized = False
        self._last_step: int | None = None
        self._snapshot_step: dict[int, int] = {}

    def _build(self, graph: tf.Graph, index: int, pair: Pair,
               train_ops: Sequence[tf.Operation]) -> _PairOps:
        layout = drift_lib.pair_layout(pair)
        written = {v.op for op in train_ops for v in written_variables(op, pair.target)}
        counts = drift_lib.optimizer_var_counts(layout, [v.op in written for v in pair.target])
        attrs = pair.declared()
        attrs["state_scopes"] = drift_lib.state_scopes(pair)
        attrs["online_scopes"] = drift_lib.online_scopes(pair, layout)
        info = dataclasses.replace(
            make_info(Kind.DRIFT, pair.name, layout.scopes, attrs), columns=DRIFT_COLUMNS
        )
        with graph.as_default(), tf.name_scope(f"{NAME_SCOPE}/pair_{index}"):
            prev = [self._copy(side, f"prev_{which}") for which, side in
                    (("target", pair.target), ("online", pair.online))]
            have_previous = tf.compat.v1.placeholder_with_default(False, [], "have_previous")
            table = drift_lib.pair_table(
                pair, RollUp.from_layout(layout), prev[0].value(), prev[1].value(),
                have_previous, counts,
            )
            with tf.control_dependencies([table]):
                snapshot = tf.group(
                    prev[0].assign(drift_lib.flatten(pair.target), read_value=False),
                    prev[1].assign(drift_lib.flatten(pair.online), read_value=False),
                )
        return _PairOps(pair, info, table, snapshot, tuple(prev), have_previous)

    @staticmethod
    def _copy(side: Sequence[Any], name: str) -> tf.Variable:
        size = sum(int(np.prod(v.shape)) for v in side)
        return tf.compat.v1.Variable(
            tf.zeros([size], drift_lib.flat_dtype(side)), trainable=False,
            collections=[SNAPSHOT_COLLECTION], name=name, use_resource=True,
        )

    def _due(self, step: int, pair: Pair) -> bool:
        copy_step = bool(pair.every) and step % pair.every == 0
        return step >= 0 and (step % self._every == 0 or copy_step)

    def before_step(self, run: Callable[..., Any], step: int,
                    write: Callable[[RecordInfo, Any, int], None]) -> None:
        """At the first train call of `step`: writes due tables, takes due snapshots."""
        if step == self._last_step:
            return
        self._last_step = step
        fetch: dict[str, Any] = {}
        for i, ops in enumerate(self._ops):
            if self._due(step, ops.pair):
                fetch[f"table_{i}"] = ops.table
            if self._due(step + 1, ops.pair):
                fetch[f"snapshot_{i}"] = ops.snapshot
        if not fetch:
            return
        if not self._initialized:
            run(self._init)  # the table reads the snapshots even when it ignores them
            self._initialized = True
        feed = {
            ops.have_previous: self._snapshot_step.get(i) == step - 1
            for i, ops in enumerate(self._ops)
        }
        values = run(fetch, feed)
        for i, ops in enumerate(self._ops):
            if f"table_{i}" in values:
                write(ops.info, values[f"table_{i}"], step)
            if f"snapshot_{i}" in values:
                self._snapshot_step[i] = step
