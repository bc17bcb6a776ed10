"""A loss that duplicates its mirror's gradient on the side its mirror trains.

Some designs pair two losses over the same two scopes, each training one side
of a distance against the other side held fixed: a vector quantizer's codebook
loss `|sg(z) - q|^2` trains the codebook, its commitment loss
`|z - sg(q)|^2` the encoder. With the commitment's stop_gradient forgotten it
trains the codebook too, by the very gradient the codebook loss already gives
it: nothing else in a run tells that from a correct loss that trains two
scopes. The FlowGraph and the conflict records together do:

- value_not_cut (mirrored): loss L updates scopes X and Y, both read straight
  into L; loss M updates Y and cuts X (its edge from X is blocked), and L's
  gradient on Y runs parallel to M's (cosine at least PARALLEL at most
  recorded steps): L repeats M's pull on Y, the side M exists to train, where
  it should read Y behind tf.stop_gradient as M reads X.

Never imports tensorflow.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable

from tb_gradscope import rules as rules_lib
from tb_gradscope.read import finding as F
from tb_gradscope.read.finding import Finding
from tb_gradscope.read.flow import LOSS_PREFIX, Flow, cover, within

PARALLEL = 0.99  # L's gradient on Y is M's, scaled
PARALLEL_SHARE = 0.75  # of the recorded steps with a cosine


def mirrored(flow: Flow, exclude: Iterable[str] = ()) -> list[Finding]:
    """Losses that train their mirror's side of a distance (see the module docstring)."""
    graph = flow.graph
    if graph is None:
        return []
    skip = list(exclude)
    into: dict[tuple[str, str], bool] = {}  # (holder, loss) -> open for that loss
    for e in graph.edges:
        if e.dst.startswith(LOSS_PREFIX):
            loss = e.dst[len(LOSS_PREFIX) :]
            into[(e.src, loss)] = into.get((e.src, loss), False) or loss not in e.blocked_for
    found = []
    for loss in flow.losses:
        for mirror in flow.losses:
            if mirror == loss:
                continue
            sides = [
                x
                for x in flow.updated[loss]
                if x not in flow.updated[mirror]
                and into.get((x, loss)) is True
                and into.get((x, mirror)) is False
            ]
            if not sides:
                continue
            flagged = [
                y
                for y in flow.updated[loss]
                if y in flow.updated[mirror]
                and into.get((y, loss)) is True
                and into.get((y, mirror)) is True
                and not any(within(y, s) for s in skip)
                and _parallel(flow, loss, mirror, y)
            ]
            for scope in cover(flagged, flow.holders):
                found.append(_finding(flow, loss, mirror, scope, sides, flagged))
    return found


def _cosines(flow: Flow, a: str, b: str, scope: str) -> list[float]:
    series = flow.run.cosines.get((a, b)) or flow.run.cosines.get((b, a)) or []
    return [cos[scope] for _, cos in series if scope in cos and cos[scope] == cos[scope]]


def _parallel(flow: Flow, a: str, b: str, scope: str) -> bool:
    values = _cosines(flow, a, b, scope)
    return bool(values) and sum(v >= PARALLEL for v in values) >= PARALLEL_SHARE * len(values)


def _finding(
    flow: Flow, loss: str, mirror: str, scope: str, sides: list[str], flagged: list[str]
) -> Finding:
    steps = sorted({s for h in flagged if within(h, scope) for s in flow.updated[loss][h]})
    real = [s for s in steps if s >= 0]
    side = cover(sides, flow.holders)[0]
    values = _cosines(flow, loss, mirror, scope) or [
        v for h in flagged if within(h, scope) for v in _cosines(flow, loss, mirror, h)
    ]
    return Finding(
        kind=F.VALUE_NOT_CUT,
        what=f"loss '{loss}' trains '{scope}', which loss '{mirror}' trains, by the same pull: '{mirror}' "
        f"trains '{scope}' toward '{side}' behind a cut, '{loss}' reads both sides uncut",
        loss=loss,
        scope=scope,
        edge=f"{scope} -> {LOSS_PREFIX}{loss}",
        evidence={
            "other_loss": mirror,
            "updates": True,
            "mirror_cuts": side,
            **(
                {"cosine_median": statistics.median(values), "cosine_min": min(values)}
                if values
                else {}
            ),
            "steps_seen": len(real),
            "loss_recorded_steps": len(flow.run.loss_steps(loss)),
            **flow.norms(loss, scope, real),
        },
        why=f"'{loss}' and '{mirror}' are the two halves of one distance ('{side}' against '{scope}'): "
        f"'{mirror}' moves '{scope}' and holds '{side}' fixed, so '{loss}' should move '{side}' and hold "
        f"'{scope}' fixed (a vector quantizer's commitment and codebook losses); trained by both, "
        f"'{scope}' gets '{mirror}''s pull twice",
        fix=f"read '{scope}' behind tf.stop_gradient in '{loss}', as '{mirror}' reads '{side}' "
        "(e.g. commitment = |z - tf.stop_gradient(q)|^2)",
        rule=str(rules_lib.Blocked(loss, f"{scope}/*")),
        first_step=min(real, default=-1),
        last_step=max(real, default=-1),
        steps=len(real),
    )
