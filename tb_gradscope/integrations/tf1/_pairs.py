"""Drift of target/online pairs in a TF1 graph (DRIFT records).

Reuses the pairs package's in-graph kernel (`tb_gradscope.record._drift`); this
module only builds its ops in the user's graph and decides, per step, which
small run calls to make. A pair's step s is recorded when s % every_n_steps == 0
(a declared `every=` says what to expect, not when to record). Drift is read just before
the step's first train call, i.e. after whatever target update the loop ran
for that step (a hard replacement before `sess.run(train_op)` shows as drift
exactly 0). A snapshot of both sides is taken at step s - 1 of a recorded step
s, which makes `target_step` and `tau` exact; without it they are NaN.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope.format import DRIFT_COLUMNS, Kind, RecordInfo, make_info
from tb_gradscope.integrations.tf1._graph import scoped_variables, written_variables
from tb_gradscope.integrations.tf1._ops import NAME_SCOPE, SNAPSHOT_COLLECTION
from tb_gradscope.pairs._detect import detect_pairs
from tb_gradscope.pairs._pairs import Pair, pair_prefixes
from tb_gradscope.record import _drift as drift_lib
from tb_gradscope.record._stats import RollUp
from tb_gradscope.record._targets import AUTO
from tb_gradscope.scopes import variable_name


@dataclasses.dataclass(frozen=True)
class _PairOps:
    pair: Pair
    info: RecordInfo
    table: tf.Tensor
    snapshot: tf.Operation  # runs after `table` is read
    copies: tuple[tf.Variable, ...]  # the flat snapshots of both sides
    have_previous: tf.Tensor  # placeholder: feed True when the snapshot is of s - 1


def resolve_pairs(pairs: Any, graph: tf.Graph) -> list[Pair]:
    """Pairs given as `Pair`s or as {target scope: online scope} of `graph`,
    or "auto": those `detect_pairs` finds by their scope names.

    Scopes are looked up among all the graph's variables, trainable or not
    (TF1 target networks are usually built with `trainable=False`).
    """
    if pairs is None:
        return []
    if isinstance(pairs, str) and pairs == AUTO:
        with graph.as_default():
            variables = tf.compat.v1.global_variables()
        return detect_pairs([v for v in variables if not v.name.startswith(NAME_SCOPE + "/")])
    if isinstance(pairs, Mapping):
        return [pair_scopes(t, o, graph=graph) for t, o in pairs.items()]
    if isinstance(pairs, Pair):
        pairs = [pairs]
    if (
        isinstance(pairs, (str, bytes))
        or not isinstance(pairs, Sequence)
        or not all(isinstance(p, Pair) for p in pairs)
    ):
        raise ValueError(
            f"pairs takes {{target_scope: online_scope}} or a list of Pair, got "
            f"{type(pairs).__name__} {str(pairs)[:60]!r}; e.g. pairs={{'Actor/target': "
            "'Actor/eval'}, pairs=[pair_scopes('target_net', 'eval_net', every=C)] or "
            "pairs='auto'"
        )
    return list(pairs)


def pair_scopes(
    target: str,
    online: str,
    *,
    tau: float | None = None,
    every: int | None = None,
    variables: Sequence[tf.Variable] | None = None,
    graph: tf.Graph | None = None,
) -> Pair:
    """The TF1 pair of the variables under scope `target` and scope `online`.

    Example (a DDPG target net built with `trainable=False`, soft-updated):

        pair = pair_scopes("Actor/target", "Actor/eval", tau=0.01)
        gs = GraphRecorder(logdir, ..., pairs=[pair])

    Args:
      target, online: scope prefixes (`variable_scope` names).
      tau: the declared EMA rate; every: the declared hard-copy period.
      variables: where to look (default: every variable of the graph,
        trainable or not; optimizer slots and the global step never count).
      graph: the graph (default: the default graph).
    """
    for arg, value in (("target", target), ("online", online)):
        if not isinstance(value, str) or not value.strip("/"):
            raise ValueError(
                f"pair_scopes: {arg} must be a scope name such as 'Actor/target', got {value!r}"
            )
    graph = graph or tf.compat.v1.get_default_graph()
    every_var = scoped_variables(graph, _global_variables(graph))
    chosen = every_var if variables is None else scoped_variables(graph, variables)
    for arg, prefix in (("target", target), ("online", online)):
        if not _under(chosen, prefix):
            raise ValueError(_missing(arg, prefix, chosen, every_var, variables is None))
    return pair_prefixes(chosen, target=target, online=online, tau=tau, every=every)


def _global_variables(graph: tf.Graph) -> list[tf.Variable]:
    with graph.as_default():
        return tf.compat.v1.global_variables()


def _under(variables: Sequence[tf.Variable], prefix: str) -> list[tf.Variable]:
    head = prefix.strip("/") + "/"
    return [v for v in variables if variable_name(v.name).startswith(head)]


def _missing(
    arg: str,
    prefix: str,
    chosen: Sequence[tf.Variable],
    every_var: Sequence[tf.Variable],
    looked_everywhere: bool,
) -> str:
    """Why no variable is under `prefix`, and what to pass instead."""
    elsewhere = _under(every_var, prefix)
    if elsewhere and not looked_everywhere:
        trainable = {id(v) for v in _trainable(every_var)}
        frozen = [v for v in elsewhere if id(v) not in trainable]
        what = (
            f"{len(frozen)} variable(s) under '{prefix}' exist but are not trainable "
            "(trainable=False)"
            if frozen
            else f"the variables under '{prefix}' are not in the list given"
        )
        return (
            f"pair {arg} scope '{prefix}': {what}; leave variables out (all the graph's "
            "variables are searched) or pass variables=tf.compat.v1.global_variables()"
        )
    if not every_var:
        return (
            f"pair {arg} scope '{prefix}': the graph has no variables at all; call "
            "pair_scopes inside `with graph.as_default():` of the model's graph, or pass graph="
        )
    roots = sorted({variable_name(v.name).split("/")[0] for v in every_var})
    return (
        f"pair {arg} scope '{prefix}': the graph has no variable under it (top-level "
        f"scopes: {', '.join(roots[:10]) or 'none'}); pass the variable_scope name "
        "the network was built under"
    )


def _trainable(variables: Sequence[tf.Variable]) -> list[tf.Variable]:
    if not variables:
        return []
    with variables[0].graph.as_default():
        return tf.compat.v1.trainable_variables()


def paired_variables(pairs: Sequence[Pair], graph: tf.Graph) -> list[tf.Variable]:
    """The variables of `pairs` that are this graph's, both sides of every pair:
    a `trainable=False` target, or `ExponentialMovingAverage` shadows, then
    have matrix rows (under the pair's names, `pair_names`)."""
    out = []
    for pair in pairs:
        for var in (*pair.target, *pair.online):
            if getattr(var, "graph", None) is graph:
                out.append(var)
    return out


def pair_names(pairs: Sequence[Pair], graph: tf.Graph) -> dict[tf.Operation, str]:
    """{variable op: the name its pair gives it} where that is not the variable's
    own: `ExponentialMovingAverage` shadows (`online/l1/w/ExponentialMovingAverage`)
    are named `ema/online/l1/w`, so that their scopes mirror their sources'
    beside them instead of folding under them."""
    out = {}
    for pair in pairs:
        for side, names in ((pair.target, pair.target_names), (pair.online, pair.online_names)):
            for var, name in zip(side, names):
                if getattr(var, "graph", None) is graph and variable_name(var.name) != name:
                    out.setdefault(var.op, name)
    return out


class PairRecorder:
    """Builds each pair's DRIFT ops and runs them at the pair's steps."""

    def __init__(
        self,
        graph: tf.Graph,
        pairs: Sequence[Pair],
        train_ops: Sequence[tf.Operation],
        every_n_steps: int,
    ):
        self._every = every_n_steps
        self._ops = [self._build(graph, i, p, train_ops) for i, p in enumerate(pairs)]
        with graph.as_default():
            self._init = tf.compat.v1.variables_initializer(
                [v for ops in self._ops for v in ops.copies], name=f"{NAME_SCOPE}/pairs_init"
            )
        self._initialized = False
        self._last_step: int | None = None
        self._snapshot_step: dict[int, int] = {}

    def _build(
        self, graph: tf.Graph, index: int, pair: Pair, train_ops: Sequence[tf.Operation]
    ) -> _PairOps:
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
            prev = [
                self._copy(side, f"prev_{which}")
                for which, side in (("target", pair.target), ("online", pair.online))
            ]
            have_previous = tf.compat.v1.placeholder_with_default(False, [], "have_previous")
            table = drift_lib.pair_table(
                pair,
                RollUp.from_layout(layout),
                prev[0].value(),
                prev[1].value(),
                have_previous,
                counts,
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
            tf.zeros([size], drift_lib.flat_dtype(side)),
            trainable=False,
            collections=[SNAPSHOT_COLLECTION],
            name=name,
            use_resource=True,
        )

    def _seen(self, step: int) -> bool:
        return self._last_step is not None and step <= self._last_step

    def _due(self, step: int) -> bool:
        return step >= 0 and step % self._every == 0

    def idle_at(self, step: int) -> bool:
        """Whether `before_step(step)` has nothing to do (no table or snapshot due)."""
        return self._seen(step) or not (self._due(step) or self._due(step + 1))

    def before_step(
        self, run: Callable[..., Any], step: int, write: Callable[[RecordInfo, Any, int], None]
    ) -> None:
        """At the first train call of `step`: writes due tables, takes due snapshots.

        Steps count per train op, so a loop of train ops in blocks reaches a
        step once per op: only the first time (the highest step so far) reads.
        """
        if self._seen(step):
            return
        self._last_step = step
        fetch: dict[str, Any] = {}
        for i, ops in enumerate(self._ops):
            if self._due(step):
                fetch[f"table_{i}"] = ops.table
            if self._due(step + 1):
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
