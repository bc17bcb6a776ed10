"""Findings from the numbers a run recorded: fighting losses, pair anomalies,
gradients that vanish or stop being finite and stay so.

- losses_fighting: two losses pull the region they both update (their shared
  trunk, judged as a whole) in opposite directions: gradient cosine at or
  below FIGHT_COSINE at most recorded steps.
- pair_anomaly: the pair anomalies of `read.anomalies` (never synced,
  frozen, moved by an optimizer, wrong direction, tau or period mismatch,
  moving statistics not tracked), with their fix and rule.
- vanishing_gradient / nonfinite_gradient: a scope a loss updates gets a zero
  gradient at the last VANISHING_STEPS recorded steps, or a NaN/Inf gradient
  at NONFINITE_STEPS recorded steps or more (steps the loss scaler skipped
  do not count).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.read import anomalies
from tb_gradscope.read import finding as F
from tb_gradscope.read.finding import Finding
from tb_gradscope.read.flow import Flow, cover, within
from tb_gradscope.read.idiom import TORCH_SOURCE, idiom

if TYPE_CHECKING:
    from tb_gradscope.read.runs import RunLogs

FIGHT_COSINE = -0.5  # at or below: the two gradients mostly cancel
FIGHT_SHARE = 0.75  # of the recorded steps with a cosine
FIGHT_MIN_STEPS = 3
VANISHING_STEPS = 3  # the last N recorded steps of the loss, in a row
NONFINITE_STEPS = 2


def losses_fighting(
    flow: Flow, taken: Iterable[tuple[str, str]] = (), explained: Iterable[tuple[str, str]] = ()
) -> list[Finding]:
    """Losses whose gradients stay strongly opposed over the region both update.

    A region is a highest scope all of whose variable holders both losses
    update (their shared trunk), judged by its own cosine: two legitimate
    losses often disagree on a few layers of a shared network (a BatchNorm
    scale here and there) while agreeing on it as a whole; only a region they
    pull apart as a whole learns neither. `taken` (loss, scope) cells already
    named by a leak are not repeated, nor are pairs of losses in `explained`
    (a leak from one into the other's scope already says why they fight)."""
    taken = list(taken)
    explained_pairs = {frozenset(p) for p in explained}
    cut = idiom(flow.graph.source if flow.graph is not None else "").cut_with
    found = []
    for (a, b), series in sorted(flow.run.cosines.items()):
        if frozenset((a, b)) in explained_pairs:
            continue
        shared = [
            h for h in flow.holders if h in flow.updated.get(a, {}) and h in flow.updated.get(b, {})
        ]
        for scope in cover(shared, flow.holders):
            by_step = {
                s: cos[scope] for s, cos in series if scope in cos and cos[scope] == cos[scope]
            }
            values = list(by_step.values())
            steps = [s for s, value in by_step.items() if value <= FIGHT_COSINE]
            if len(values) < FIGHT_MIN_STEPS or len(steps) < FIGHT_SHARE * len(values):
                continue
            if any(within(scope, s) or within(s, scope) for loss, s in taken if loss in (a, b)):
                continue
            loss, other = (b, a) if flow.losses.index(b) > flow.losses.index(a) else (a, b)
            found.append(
                Finding(
                    kind=F.LOSSES_FIGHTING,
                    what=f"losses '{a}' and '{b}' both update '{scope}' and pull it in opposite directions: "
                    f"gradient cosine <= {FIGHT_COSINE:g} at {len(steps)} of {len(values)} recorded steps",
                    loss=loss,
                    scope=scope,
                    edge=flow.edge_into(loss, scope),
                    evidence={
                        "other_loss": other,
                        "cosine_by_step": {str(k): v for k, v in by_step.items()},
                        "cosine_median": statistics.median(values),
                        "steps_opposed": len(steps),
                        "steps_with_cosine": len(values),
                    },
                    why="two losses whose gradients on a shared scope cancel make it learn neither; usually one "
                    "of them was meant only to read it",
                    fix=f"if '{loss}' should only read '{scope}', cut it {cut} where its head "
                    f"reads '{scope}'; if both must train it, reweight them or give each its own scope",
                    rule=str(rules_lib.Never(loss, f"{scope}/*")),
                    first_step=min(steps),
                    last_step=max(steps),
                    steps=len(steps),
                )
            )
    return found


_ANOMALY_FIX = {
    anomalies.NEVER_SYNCED: "copy the online weights into the target once before training "
    "(Keras: target.set_weights(online.get_weights()); tf.Variables: t.assign(o) for each pair)",
    anomalies.TARGET_FROZEN: "make sure the target update (copy or Polyak) runs, inside the traced step if the "
    "step is a tf.function",
    anomalies.MOVED_BY_OPTIMIZER: "leave the target out of every optimizer's var_list and stop its gradient",
    anomalies.WRONG_DIRECTION: "swap the arguments of the target update: target <- online, not online <- target",
    anomalies.TAU_MISMATCH: "make the update use the tau you declared (or declare the tau it uses)",
    anomalies.EVERY_MISMATCH: "make the update copy every N steps as declared (or declare what it does)",
    anomalies.MOVING_STATS_NOT_TRACKED: "update the target from model.weights (moving statistics included), "
    "not only trainable_weights",
}

# The same fixes in PyTorch: the copy is load_state_dict or an in-place update
# under torch.no_grad(), the optimizer's parameters are its param groups.
_ANOMALY_FIX_TORCH = {
    anomalies.NEVER_SYNCED: "copy the online weights into the target once before training "
    "(target.load_state_dict(online.state_dict()), or build the target as copy.deepcopy(online))",
    anomalies.TARGET_FROZEN: "make sure the target update (load_state_dict, or an in-place Polyak update "
    "under torch.no_grad()) runs after the optimizer steps",
    anomalies.MOVED_BY_OPTIMIZER: "leave the target's parameters out of every optimizer's param groups "
    "(optim.Adam(online.parameters()), not of a module holding both) and .detach() its output",
    anomalies.MOVING_STATS_NOT_TRACKED: "update the target from state_dict() (buffers such as BatchNorm's "
    "running statistics included), not only parameters()",
}

# The same fixes in TF1 graph code: the copy is an assign op run in the session.
_ANOMALY_FIX_TF1 = {
    anomalies.NEVER_SYNCED: "copy the online variables into the target once, right after initializing: "
    "sess.run([tf.compat.v1.assign(t, o) for t, o in zip(target_vars, online_vars)])",
    anomalies.TARGET_FROZEN: "make sure the target update's assign ops run: sess.run them with (or after) the "
    "train op, or give the train op a control dependency on them",
    anomalies.MOVED_BY_OPTIMIZER: "leave the target out of every minimize's var_list (or create it with "
    "trainable=False) and stop its gradient",
    anomalies.WRONG_DIRECTION: "swap the arguments of the assign ops: tf.compat.v1.assign(target, ...), "
    "not assign(online, ...)",
    anomalies.MOVING_STATS_NOT_TRACKED: "update the target from every global variable of the online scope "
    "(moving statistics included), not only the trainable ones",
}


def anomaly_fix(name: str, source: str) -> str:
    """The one-line fix of a pair anomaly, in the words of the framework that
    traced the run (`FlowGraph.source`: "tf1" for Session code, "torch" for PyTorch)."""
    if source == F.TF1_SOURCE and name in _ANOMALY_FIX_TF1:
        return _ANOMALY_FIX_TF1[name]
    if source == TORCH_SOURCE and name in _ANOMALY_FIX_TORCH:
        return _ANOMALY_FIX_TORCH[name]
    return _ANOMALY_FIX.get(name, "check the target update")


def pair_anomalies(run: RunLogs) -> list[Finding]:
    """One finding per pair anomaly (recorded or derived from DRIFT), first step first."""
    events = [e for e in run.events if e.type == fmt.ANOMALY]
    for pair in run.pairs:
        events += anomalies.find_anomalies(
            pair.name, pair.attrs, list(pair.steps), list(pair.tables), moves=pair.online_moves
        )
    attrs = {p.name: p.attrs for p in run.pairs}
    source = run.flowgraph.source if run.flowgraph is not None else ""
    groups: dict[tuple[str, str, str], list[fmt.Event]] = {}
    for event in events:
        groups.setdefault((event.name, event.pair, event.scope), []).append(event)
    found = []
    for (name, pair, scope), seen in sorted(groups.items()):
        seen.sort(key=lambda e: e.step)
        first, steps = seen[0], sorted({e.step for e in seen})
        pair_attrs = attrs.get(pair, {})
        target, online = str(pair_attrs.get("target", scope)), str(pair_attrs.get("online", ""))
        found.append(
            Finding(
                kind=F.PAIR_ANOMALY,
                what=first.message,
                loss="",
                scope=scope,
                pair=pair,
                evidence={"anomaly": name, **first.evidence},
                why="a target that does not follow its online network as declared gives every loss that "
                "reads it a wrong target",
                fix=anomaly_fix(name, source),
                rule=_pair_rule(name, target, online, pair_attrs),
                first_step=steps[0],
                last_step=steps[-1],
                steps=len(steps),
            )
        )
    return found


def _pair_rule(name: str, target: str, online: str, attrs) -> str:
    if name == anomalies.MOVED_BY_OPTIMIZER or not online:
        return str(rules_lib.Never("*", f"{target}/*"))
    tau, every = attrs.get("tau"), attrs.get("every")
    tau = (
        tau
        if isinstance(tau, (int, float)) and not isinstance(tau, bool) and 0 < tau <= 1
        else None
    )
    every = every if isinstance(every, int) and not isinstance(every, bool) and every > 0 else None
    return str(rules_lib.Tracks(target, online, tau, every))


def numeric(flow: Flow) -> list[Finding]:
    """Scopes a loss updates whose gradient stays zero, or stays non-finite."""
    run = flow.run
    skipped = {e.step for e in run.events if e.type == fmt.SKIPPED}
    found = []
    for loss in flow.losses:
        steps = [s for s in run.loss_steps(loss) if s not in skipped]
        vanish, bad = {}, {}
        for scope in flow.holders:
            if not _expected(run, loss, scope):
                continue
            states = run.states(loss, scope)
            tail = steps[-VANISHING_STEPS:]
            if len(tail) == VANISHING_STEPS and all(states[s] == fmt.VANISHING for s in tail):
                vanish[scope] = tail
            nonfinite = [s for s in steps if states[s] == fmt.NONFINITE]
            if len(nonfinite) >= NONFINITE_STEPS:
                bad[scope] = nonfinite
        for kind, flagged in ((F.NONFINITE, bad), (F.VANISHING, vanish)):
            for scope in cover(flagged, flow.holders):
                seen = sorted({s for h, hs in flagged.items() if within(h, scope) for s in hs})
                found.append(_numeric_finding(kind, loss, scope, seen, len(steps)))
    return found


def _expected(run: RunLogs, loss: str, scope: str) -> bool:
    """The loss is meant to update the scope: static `updates`, or no FlowGraph."""
    graph = run.flowgraph
    return graph is None or graph.cells.get(loss, {}).get(scope) == fmt.UPDATES


def _numeric_finding(kind: str, loss: str, scope: str, steps: list[int], recorded: int) -> Finding:
    if kind == F.NONFINITE:
        what = f"the gradient of loss '{loss}' on '{scope}' holds NaN or Inf at {len(steps)} of {recorded} recorded steps"
        why = "an optimizer step fed by a non-finite gradient writes NaN into the weights (or is skipped)"
        fix = "find the op that overflows (log of 0, division by a vanishing norm, exp of a large logit) and clip or guard it"
    else:
        what = f"the gradient of loss '{loss}' on '{scope}' is zero at its last {len(steps)} recorded steps"
        why = f"'{scope}' is meant to learn from '{loss}' but no longer gets any gradient (saturated or dead units)"
        fix = "check the activations feeding it (dead ReLUs, saturated tanh/sigmoid) and the learning rate"
    return Finding(
        kind=kind,
        what=what,
        loss=loss,
        scope=scope,
        evidence={
            "steps_seen": len(steps),
            "loss_recorded_steps": recorded,
            "at_steps": steps[:20],
        },
        why=why,
        fix=fix,
        rule="",
        first_step=steps[0],
        last_step=steps[-1],
        steps=len(steps),
    )
