"""When a recorded step needs the host to check rules: a test in the graph first.

Handing a step's tables to the `RuleChecker` costs a host round trip
(`tf.py_function`), more than a small training step. But a `never` or `only`
rule can break at a step only where a row it constrains received a gradient
whose norm is not 0 (NaN counts): `grad_vars != 0 and l2 != 0`, the checker's
own test. So the graph tests those rows, and the host is called only when one
of them is hit: exact (the checker still decides), and a violation still
raises at the step it happens.

Which rows to test is asked of the checker itself, at trace time: for each
loss and row, does a table where only that row received a gradient break a
rule? A `blocked` rule can also break with no gradient at all (a cut the
FlowGraph does not show is reported at every recorded step), and so can an
`updates` rule (a scope that should train and got nothing), so a step with
either makes the host check every recorded step, as before.

A `rec.function` recorded variant returns the test and the tables and the host
checks them after the call (`_step_function.Variants.defer`), so no host
callback runs inside the step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.rules import Blocked, Rule, Tracks, Updates, check_stats
from tb_gradscope.rules.model import loss_matches

_COLUMNS = fmt.KIND_SPECS[fmt.Kind.GRAD_STATS].columns
_GRAD_VARS, _L2 = _COLUMNS.index("grad_vars"), _COLUMNS.index("l2")


def watched_rows(
    rules: Sequence[Rule], losses: Sequence[str], scopes: Sequence[str]
) -> dict[str, np.ndarray] | None:
    """{loss: rows where a gradient may break a rule}, or None when the host
    must check every recorded step (a `blocked` or `updates` rule on one of
    `losses`: either breaks with no gradient at all)."""
    checked = [r for r in rules if not isinstance(r, Tracks)]
    if any(
        isinstance(r, (Blocked, Updates)) and any(loss_matches(name, r.loss) for name in losses)
        for r in checked
    ):
        return None
    watched = {}
    for name in losses:
        mine = [r for r in checked if loss_matches(name, r.loss)]
        info = fmt.make_info(fmt.Kind.GRAD_STATS, name, scopes)
        rows = [i for i in range(len(scopes)) if mine and _breaks(mine, name, info, i)]
        watched[name] = np.asarray(rows, np.int32)
    return watched


def _breaks(rules: Sequence[Rule], loss: str, info: fmt.RecordInfo, row: int) -> bool:
    """Whether a gradient at `row` alone (grad_vars, l2, max_abs 1) breaks a rule."""
    values = np.zeros((len(info.scopes), len(_COLUMNS)), np.float32)
    values[row, [_GRAD_VARS, _L2, _COLUMNS.index("max_abs")]] = 1.0
    events = check_stats(rules, 0, {loss: fmt.Table(info, values)})
    return any("unmatched" not in e.evidence for e in events)


def any_hit(grads: Mapping[str, tf.Tensor], watched: Mapping[str, np.ndarray]) -> tf.Tensor | None:
    """In the graph: whether a watched row of any loss's GRAD_STATS table got a
    gradient (None when no row is watched: the host is never needed)."""
    hits = []
    for name, rows in watched.items():
        if len(rows):
            table = tf.gather(grads[name], rows)
            hit = tf.logical_and(
                tf.not_equal(table[:, _GRAD_VARS], 0), tf.not_equal(table[:, _L2], 0)
            )
            hits.append(tf.reduce_any(hit))
    if not hits:
        return None
    return hits[0] if len(hits) == 1 else tf.reduce_any(tf.stack(hits))
