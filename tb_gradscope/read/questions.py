"""Questions: patterns that are a bug in one standard design and correct in
another, which only names tell apart. doctor asks them (severity QUESTION,
exit 0; 1 with --strict), it never calls them leaks.

- predictor_bypassed: a loss trains a predictor (a scope named `predictor`,
  `pred`, `prediction`) and an encoder whose output reaches the predictor,
  and the encoder's output also enters the loss directly, on an edge no cut
  stands on, with no per-path cut of the loss on the encoder anywhere.
  SimSiam and BYOL put a predictor on one branch because the other branch
  must be cut (`z2` behind tf.stop_gradient): without the cut the encoder is
  trained by both paths and collapses. A SimCLR-style loss trains its
  encoder by both paths correctly, but has no predictor: the name is the only
  evidence, so this is a question. The rule it proposes, `blocked(loss,
  encoder/*, except_via=predictor)`, is the one a correct SimSiam keeps.

Never imports tensorflow.
"""

from __future__ import annotations

from tb_gradscope import rules as rules_lib
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.read import finding as F
from tb_gradscope.read.finding import Finding
from tb_gradscope.read.flow import LOSS_PREFIX, Flow, downstream, within

PREDICTOR_WORDS = frozenset({"predictor", "pred", "prediction", "predict"})


def is_predictor(scope: str) -> bool:
    """Whether a segment of `scope` names a predictor (`predictor`, `pred_head`)."""
    return any(
        word in PREDICTOR_WORDS
        for seg in scope.split(scopes_lib.SEPARATOR)
        for word in seg.lower().replace("-", "_").split("_")
    )


def predictor_bypassed(flow: Flow) -> list[Finding]:
    """Encoders a loss trains through its predictor and, uncut, around it."""
    graph = flow.graph
    if graph is None:
        return []
    found = []
    for loss in flow.losses:
        node = LOSS_PREFIX + loss
        predictors = [h for h in flow.updated[loss] if is_predictor(h)]
        if not predictors:
            continue
        root = _predictor_root(predictors[0])
        direct = {e.src for e in graph.edges if e.dst == node and loss not in e.blocked_for}
        per_path = {e.producer_scope for e in graph.blocked_edges if e.loss == loss and e.open_path}
        flagged = [
            h
            for h in flow.updated[loss]
            if not within(h, root)
            and h in direct
            and any(within(p, root) for p in downstream(graph, h))
        ]
        if not flagged or any(within(p, _top(h)) for h in flagged for p in per_path):
            continue
        encoder = scope = _top(flagged[0])
        steps = sorted({s for h in flagged for s in flow.updated[loss][h] if s >= 0})
        found.append(
            Finding(
                kind=F.PREDICTOR_BYPASSED,
                what=f"loss '{loss}' trains '{scope}' through the predictor '{root}' and also "
                f"directly, with no cut on the direct path: is '{loss}' a SimSiam/BYOL loss whose "
                "other branch should be behind tf.stop_gradient?",
                loss=loss,
                scope=scope,
                edge=f"{scope} -> {node}",
                evidence={
                    "predictor": root,
                    "direct_from": sorted(flagged),
                    "steps_seen": len(steps),
                    "loss_recorded_steps": len(flow.run.loss_steps(loss)),
                    **flow.norms(loss, scope, steps),
                },
                why=f"a predictor sits on one branch of a symmetric loss so that the other branch can "
                f"be cut (SimSiam, BYOL): trained by both, '{encoder}' collapses to a constant; a "
                "contrastive loss that means to train both paths has no predictor",
                fix=f"wrap the embedding '{loss}' compares the prediction with in tf.stop_gradient "
                "(SimSiam: D(p1, tf.stop_gradient(z2)) + D(p2, tf.stop_gradient(z1))); if both paths "
                "are meant to train it, ignore this question",
                rule=str(rules_lib.Blocked(loss, f"{encoder}/*", (root,))),
                severity=F.QUESTION,
                first_step=min(steps, default=-1),
                last_step=max(steps, default=-1),
                steps=len(steps),
            )
        )
    return found


def _predictor_root(scope: str) -> str:
    """The outermost ancestor of `scope` named a predictor."""
    return next(a for a in scopes_lib.ancestors(scope) if is_predictor(a.rsplit("/", 1)[-1]))


def _top(scope: str) -> str:
    return scopes_lib.ancestors(scope)[0]
