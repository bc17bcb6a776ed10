"""Gradient leaks between losses and into targets, found without rules.

Each detector looks at what a run recorded (FlowGraph cells and scope graph,
per-step flow states) and names the (loss, scope) cells that are probably a
bug; docs/CORRECTNESS.md shows which corpus shapes each one fires on:

- target_trained: a loss updates a target/EMA scope (declared pair or a
  target found by name): the TD target or teacher learns from the loss.
- target_not_cut: a loss's gradient reaches a target scope whose variables
  are trainable, though no optimizer step fed by the loss writes it: the
  target side was computed inside the tape without stop_gradient, one
  var_list away from training the target. A target created trainable=False
  (the TF1 idiom, left out of every `minimize`) reached so is not a finding.
- judge_trained: a loss updates a scope another loss also updates, and that
  scope reads the output of a scope only this loss updates: the actor trains
  the critic that scores it, the generator the discriminator.
- shared_by_optimizers: two optimizer steps of the same trace write one
  scope, each fed by a different loss, and one of the losses trains nothing
  else (a critic optimizer without var_list training the actor). Two losses
  that each train a head of their own and both train the trunk under it, by
  their own var_lists, are a design, not a finding.
- value_not_cut: a loss's gradient reaches a scope another loss trains,
  whose output enters this loss from the side (no scope it updates computes
  from it), as a baseline or a weight does (an advantage without
  stop_gradient). A scope whose output joins the path from this loss's own
  scopes to the loss is part of the network the loss differentiates through
  (the state tower of a DDPG critic whose action tower reads the actor):
  cutting it is no fix, so it is no finding. The value enters at the scope
  it is read from: the trunk under a value head the loss's optimizer leaves
  out (an actor and a critic optimizer) is that value's input, not a second
  finding. Without a FlowGraph (an eager loop never traced) the dataflow is
  unknown: a loss reaching a scope named after another loss (`critic_head`
  for loss `critic`, or after its role: `v`, `value_head`) is reported,
  marked partial.

Severity: a finding whose loss's optimizer writes the scope is a leak; one
whose gradient only reaches it (target_not_cut, value_not_cut of a value the
loss's optimizer does not write) is a hazard: nothing is trained wrong today.

Single numbers (a temperature, a learned loss weight) are coefficients, not
predictions: a loss reaching one is not a leak.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from tb_gradscope import rules as rules_lib
from tb_gradscope.format.flowgraph import MIXED, TRAINABLE
from tb_gradscope.read import finding as F
from tb_gradscope.read.finding import Finding
from tb_gradscope.read.flow import Flow, cover
from tb_gradscope.read.idiom import Idiom, idiom
from tb_gradscope.read.targets import Target


def target_trained(flow: Flow, targets: Sequence[Target]) -> list[Finding]:
    """A loss whose gradient updates a target scope."""
    words = _words(flow)
    found = []
    for loss in flow.losses:
        flagged = [
            h for h in flow.holders if h in flow.updated[loss] and any(t.holds(h) for t in targets)
        ]
        for scope in cover(flagged, flow.holders):
            inside = _targets_at(scope, targets)
            target = inside[0]
            steps = _steps(flow.updated[loss], flagged, scope)
            online = [h for h in flow.updated[loss] if any(_within(h, t.online) for t in inside)]
            boot = " and the online side it should anchor" if online else ""
            found.append(
                Finding(
                    kind=F.TARGET_TRAINED,
                    what=f"loss '{loss}' updates {'teacher' if target.teacher else 'target'} scope "
                    f"'{scope}'{boot}: its gradient reaches the "
                    f"target and an optimizer step fed by it writes the target's variables",
                    loss=loss,
                    scope=scope,
                    pair=target.pair if len(inside) == 1 else "",
                    edge=flow.edge_into(loss, scope),
                    evidence=_target_evidence(
                        flow, loss, scope, inside, steps, online_updated_by_loss=bool(online)
                    ),
                    why=_anchor_why(target, loss),
                    fix=f"leave '{scope}' out of the {words.scoped} of the optimizer that '{loss}' feeds, and "
                    f"compute the target side of '{loss}' {words.cut_under} ({words.outside})",
                    rule=str(rules_lib.Never(loss, f"{scope}/*")),
                    **_span(steps),
                )
            )
    return found


def _anchor_why(target: Target, loss: str) -> str:
    """Why a target or teacher trained by `loss` is a leak, in its role's words."""
    if target.teacher:
        return (
            f"'{target.root}' is the teacher of '{target.online}': it must stay as it was trained (or move "
            f"only by its own update, an EMA or a copy), never by the loss it guides; trained by '{loss}' "
            "it moves toward its student, and distillation teaches the student its own outputs"
        )
    return (
        f"'{target.root}' is the target of '{target.online}': it must move only by its sync "
        f"(copy or Polyak average); trained by '{loss}' it chases the prediction it should anchor"
    )


def target_not_cut(flow: Flow, targets: Sequence[Target]) -> list[Finding]:
    """A loss whose gradient reaches a trainable target scope that it does not update."""
    graph = flow.graph
    if graph is None or graph.trainable is None:
        return []  # a log without trainability cannot tell this from a trainable=False target
    words = _words(flow)
    found = []
    for loss in flow.losses:
        flagged = [
            h
            for h in flow.holders
            if h in flow.reached[loss]
            and h not in flow.updated[loss]
            and graph.trainability(h) in (TRAINABLE, MIXED)
            and any(t.holds(h) for t in targets)
        ]
        for scope in cover(flagged, flow.holders):
            inside = _targets_at(scope, targets)
            target = inside[0]
            steps = _steps(flow.reached[loss], flagged, scope)
            found.append(
                Finding(
                    kind=F.TARGET_NOT_CUT,
                    what=f"the gradient of loss '{loss}' reaches target scope '{scope}', whose variables are "
                    f"trainable: no cut stands between them (no optimizer step fed by '{loss}' writes it today)",
                    loss=loss,
                    scope=scope,
                    pair=target.pair if len(inside) == 1 else "",
                    edge=flow.edge_into(loss, scope),
                    evidence=_target_evidence(
                        flow,
                        loss,
                        scope,
                        inside,
                        steps,
                        trainable=sorted(
                            {graph.trainability(h) for h in flagged if _within(h, scope)}
                        ),
                    ),
                    why=f"'{target.root}' is the target of '{target.online}' and must move only by its sync; "
                    f"its trainable variables in the gradient path of '{loss}' are trained by "
                    f"{words.untargeted}, toward the prediction they should anchor",
                    fix=f"compute the target side of '{loss}' {words.cut_under} ({words.outside}); "
                    f"if '{target.root}' never trains, {words.untrainable}",
                    rule=str(rules_lib.Blocked(loss, f"{scope}/*")),
                    severity=F.HAZARD,
                    **_span(steps),
                )
            )
    return found


def _words(flow: Flow) -> Idiom:
    """The phrases of the framework that traced the run (`FlowGraph.source`)."""
    return idiom(flow.graph.source if flow.graph is not None else "")


def _targets_at(scope: str, targets: Sequence[Target]) -> list[Target]:
    """The targets holding `scope` or held by it."""
    return [t for t in targets if t.holds(scope) or _within(t.root, scope)]


def _target_evidence(
    flow: Flow, loss: str, scope: str, inside: Sequence[Target], steps: list[int], **extra: Any
) -> dict[str, Any]:
    """Evidence of a finding about `loss` reaching target scope `scope`: the
    targets and their online sides, `extra`, then the optimizer, steps and norms."""
    return {
        "targets": [t.root for t in inside],
        "online": [t.online for t in inside],
        "pairs_declared": all(t.pair for t in inside),
        **extra,
        **_optimizer(flow, loss),
        **_seen(flow, loss, steps),
        **flow.norms(loss, scope, steps),
    }


def cross_loss(flow: Flow, exclude: Iterable[str] = ()) -> list[Finding]:
    """judge_trained, shared_by_optimizers and value_not_cut, each (loss,
    scope) once, under the most specific kind; scopes within `exclude`
    (targets) are left to target_trained. A loss found training another's
    scope (judge, optimizers) no longer counts as that scope's owner."""
    skip = list(exclude)
    holders = [h for h in flow.holders if not any(_within(h, s) for s in skip)]
    chosen: dict[tuple[str, str], tuple[str, str]] = {}  # (loss, holder) -> (kind, other loss)
    for holder in holders:
        for loss in flow.losses:
            hit = _judge(flow, loss, holder) or _optimizers(flow, loss, holder)
            if hit:
                chosen[(loss, holder)] = hit
    intruders = {holder: {loss for (loss, h) in chosen if h == holder} for holder in holders}
    for holder in holders:
        for loss in flow.losses:
            if (loss, holder) not in chosen and loss not in intruders[holder]:
                hit = _value(flow, loss, holder, intruders[holder])
                if hit:
                    chosen[(loss, holder)] = hit
    groups: dict[tuple[str, str, str], list[str]] = {}
    for (loss, holder), (kind, other) in chosen.items():
        groups.setdefault((kind, loss, other), []).append(holder)
    found = []
    for (kind, loss, other), flagged in sorted(
        groups.items(), key=lambda kv: (F.KINDS.index(kv[0][0]), kv[0][1:])
    ):
        also = (
            [h for h in flow.reached[loss] if other in flow.owners(h)]
            if kind == F.VALUE_NOT_CUT
            else []
        )
        for scope in cover(flagged, flow.holders, also):
            found.append(
                _BUILD[kind](flow, loss, other, scope, [h for h in flagged if _within(h, scope)])
            )
    return found


def _judge(flow: Flow, loss: str, holder: str) -> tuple[str, str] | None:
    if holder not in flow.updated[loss]:
        return None
    others = [o for o in flow.owners(holder) if o != loss]
    source = flow.feeds(flow.own(loss), [holder]) if others else None
    return (F.JUDGE_TRAINED, others[0]) if source else None


def _optimizers(flow: Flow, loss: str, holder: str) -> tuple[str, str] | None:
    """Two optimizer steps, each fed by its own loss, write `holder`: a finding
    only when one of the losses trains nothing else (all it trains is written
    by the other's optimizer too: a critic optimizer without var_list training
    the actor). When each loss also trains scopes of its own, `holder` is a
    trunk both heads read, and per-loss var_lists that both take it in are a
    design (seed 01's Agent); only a rule (`never(loss2, Agent/layer1)`) can
    say it is not."""
    owners = flow.owners(holder)
    labels = {o: flow.optimizer.get(o, "") for o in owners}
    if loss not in owners or "" in labels.values() or len(set(labels.values())) < 2:
        return None
    keepers = [o for o in owners if not flow.own(o)]
    if not keepers or loss in keepers:
        return None
    # Among the losses with scopes of their own, the later optimizer step is
    # taken as the one given too many variables.
    candidates = [o for o in owners if o not in keepers]
    intruder = max(candidates, key=lambda o: (_label_order(flow, labels[o]), flow.losses.index(o)))
    if intruder != loss:
        return None
    others = [o for o in keepers if labels[o] != labels[loss]]
    return (F.SHARED_BY_OPTIMIZERS, others[0]) if others else None


def _value(flow: Flow, loss: str, holder: str, intruders: set[str]) -> tuple[str, str] | None:
    if flow.graph is None:
        return _value_by_name(flow, loss, holder)
    # A scope not known to be a single number may be one: unknown is no finding.
    if holder not in flow.reached[loss] or flow.run.is_scalar(holder) is not False:
        return None
    others = [o for o in flow.owners(holder) if o != loss and o not in intruders]
    own = flow.own(loss)
    if not others or not own or flow.feeds(own, [holder]) or not flow.enters_aside(loss, holder):
        return None
    return F.VALUE_NOT_CUT, others[0]


def _value_by_name(flow: Flow, loss: str, holder: str) -> tuple[str, str] | None:
    """Without a FlowGraph: `loss` reaches a scope named after another loss
    that trains it (`ac/critic_head` for loss `critic`), and not after itself."""
    if (
        holder not in flow.reached[loss]
        or named_after(holder, loss)
        or flow.run.is_scalar(holder) is not False
    ):
        return None
    others = [o for o in flow.owners(holder) if o != loss and named_after(holder, o)]
    return (F.VALUE_NOT_CUT, others[0]) if others else None


# The other names of a loss's role: an actor-critic's heads are as often
# called after what they compute (`pi`, `v`, `value_head`) as after its losses.
ROLE_NAMES = {
    "critic": ("value", "v", "vf", "baseline"),
    "value": ("critic", "v", "vf", "baseline"),
    "actor": ("policy", "pi"),
    "policy": ("actor", "pi"),
}


def named_after(scope: str, loss: str) -> bool:
    """Whether a segment of `scope` is the loss's name or another name of its
    role (`ROLE_NAMES`), alone or as the first word of a role (`critic`,
    `critic_head`, `critic-net`, `value_head`, `v` for loss `critic`)."""
    names = (loss.lower(), *ROLE_NAMES.get(loss.lower(), ()))
    for seg in scope.lower().split("/"):
        for name in names:
            if seg == name or (
                seg.startswith(name) and seg[len(name) : len(name) + 1] in ("_", "-")
            ):
                return True
    return False


def _judge_finding(flow: Flow, loss: str, other: str, scope: str, holders: list[str]) -> Finding:
    steps = _steps(flow.updated[loss], holders, scope)
    source = flow.feeds(flow.own(loss), holders)
    return Finding(
        kind=F.JUDGE_TRAINED,
        what=f"loss '{loss}' updates '{scope}', which loss '{other}' trains and which reads the output of "
        f"'{source}', a scope only '{loss}' trains",
        loss=loss,
        scope=scope,
        edge=flow.edge_into(loss, scope),
        evidence={
            "other_loss": other,
            "feeds_from": source,
            **_optimizer(flow, loss),
            **_seen(flow, loss, steps),
            **flow.norms(loss, scope, steps),
        },
        why=f"'{loss}' learns through '{scope}' (its critic or discriminator); training '{scope}' on "
        f"'{loss}' lets it move the judge instead of improving '{source}'",
        fix=f"give the optimizer that '{loss}' feeds only its own variables (a {_words(flow).scoped} "
        f"without '{scope}')",
        rule=str(rules_lib.Never(loss, f"{scope}/*")),
        **_span(steps),
    )


def _optimizers_finding(
    flow: Flow, loss: str, other: str, scope: str, holders: list[str]
) -> Finding:
    steps = _steps(flow.updated[loss], holders, scope)
    mine, theirs = flow.optimizer.get(loss, ""), flow.optimizer.get(other, "")
    return Finding(
        kind=F.SHARED_BY_OPTIMIZERS,
        what=f"'{scope}' is written by two optimizer steps: the one fed by '{loss}' ({mine}) and the one "
        f"fed by '{other}' ({theirs})",
        loss=loss,
        scope=scope,
        edge=flow.edge_into(loss, scope),
        evidence={
            "other_loss": other,
            "optimizer": mine,
            "other_optimizer": theirs,
            **_seen(flow, loss, steps),
            **flow.norms(loss, scope, steps),
        },
        why=f"everything '{other}' trains is written by the optimizer step '{loss}' feeds too: that "
        f"optimizer's variables take in '{other}'s network (no var_list, or one too wide), so "
        f"'{loss}' trains what '{other}' exists to train",
        fix=f"give the optimizer that '{loss}' feeds a {_words(flow).scoped} without '{scope}' (or, if '{scope}' "
        f"belongs to '{loss}', leave it out of the one '{other}' feeds)",
        rule=str(rules_lib.Never(loss, f"{scope}/*")),
        **_span(steps),
    )


def _value_finding(flow: Flow, loss: str, other: str, scope: str, holders: list[str]) -> Finding:
    steps = _steps(flow.reached[loss], holders, scope)
    trains = any(h in flow.updated[loss] for h in holders)
    what = (
        f"loss '{loss}' trains '{scope}', which loss '{other}' trains, through a value it only reads"
        if trains
        else f"the gradient of loss '{loss}' reaches '{scope}', which loss '{other}' trains, through a value "
        "it only reads (its optimizer drops it today: one var_list away from training it)"
    )
    return Finding(
        kind=F.VALUE_NOT_CUT,
        what=what,
        loss=loss,
        scope=scope,
        edge=flow.edge_into(loss, scope),
        evidence={
            "other_loss": other,
            "updates": trains,
            **_optimizer(flow, loss),
            **_seen(flow, loss, steps),
            **flow.norms(loss, scope, steps),
            **_cosine(flow, loss, other, scope),
        },
        why=f"'{scope}' enters '{loss}' from the side, as a baseline or weight does, not as part of what "
        f"'{loss}' trains; its gradient there pulls the prediction of '{other}' toward what suits '{loss}'",
        fix=_words(flow).cut_value.format(value=f"the value '{loss}' reads from '{scope}'")
        + f" (e.g. {_words(flow).cut_example})",
        rule=_value_rule(flow, loss, scope, trains),
        severity=F.LEAK if trains else F.HAZARD,
        **_span(steps),
    )


def _value_rule(flow: Flow, loss: str, scope: str, trains: bool) -> str:
    """The pin of a value not cut: one the leak breaks and every fix keeps.

    Cutting the value (`stop_gradient` / `.detach()`) and no longer reading it
    (a cross-talk dropped) both fix a leak that trains the scope, and
    `never(loss, scope/*)` holds on both; `blocked` would fail the second (the
    loss no longer depends on the scope). A hazard, whose gradient the
    optimizer drops today, keeps `never`: only `blocked` breaks on it. Without
    a FlowGraph, dependence is unknown and `blocked` cannot be checked."""
    if trains or flow.graph is None:
        return str(rules_lib.Never(loss, f"{scope}/*"))
    return str(rules_lib.Blocked(loss, f"{scope}/*"))


_BUILD = {
    F.JUDGE_TRAINED: _judge_finding,
    F.SHARED_BY_OPTIMIZERS: _optimizers_finding,
    F.VALUE_NOT_CUT: _value_finding,
}


def _cosine(flow: Flow, a: str, b: str, scope: str) -> dict:
    """The recorded gradient cosine of the two losses on `scope`, summed up."""
    series = flow.run.cosines.get((a, b)) or flow.run.cosines.get((b, a)) or []
    values = [cos[scope] for _, cos in series if scope in cos and cos[scope] == cos[scope]]
    if not values:
        return {}
    return {
        "cosine_median": statistics.median(values),
        "cosine_min": min(values),
        "cosine_steps": len(values),
    }


def _optimizer(flow: Flow, loss: str) -> dict:
    label = flow.optimizer.get(loss, "")
    return {"optimizer": label} if label else {}


def _label_order(flow: Flow, label: str) -> int:
    order = list(
        dict.fromkeys(flow.optimizer[loss] for loss in flow.losses if loss in flow.optimizer)
    )
    return order.index(label) if label in order else -1


def _steps(per_holder: dict[str, list[int]], holders: list[str], scope: str) -> list[int]:
    return sorted({s for h in holders if _within(h, scope) for s in per_holder.get(h, [])})


def _seen(flow: Flow, loss: str, steps: list[int]) -> dict:
    recorded = flow.run.loss_steps(loss)
    return {"steps_seen": len([s for s in steps if s >= 0]), "loss_recorded_steps": len(recorded)}


def _span(steps: list[int]) -> dict:
    real = [s for s in steps if s >= 0]
    return {
        "first_step": min(real, default=-1),
        "last_step": max(real, default=-1),
        "steps": len(real),
    }


def _within(scope: str, root: str) -> bool:
    return scope == root or scope.startswith(root + "/")
