"""Findings from the numbers a run recorded: fighting losses, pair anomalies,
gradients that vanish or stop being finite and stay so.

- losses_fighting: two losses that each train scopes of their own pull the
  region they both update (their shared trunk, judged as a whole) in
  opposite directions: gradient cosine at or below FIGHT_COSINE at most
  recorded steps. Never when one of them trains nothing the other does not
  (distillation, a commitment term, a critic whose head the actor reaches):
  pulling that network is its purpose.
- pair_anomaly: the pair anomalies of `read.anomalies` (never synced,
  frozen, moved by an optimizer, wrong direction, tau or period mismatch,
  moving statistics not tracked), with their fix and rule.
- never_trained: a scope that a loss's gradient reaches, that no optimizer
  step applies, that never moves (its recorded update norm is 0 at every
  recorded step) and that is no pair's target or teacher: a multi-task head
  left out of every var_list, a swapped student. A scope whose variables are
  not trainable (a frozen layer) is meant not to train.
- vanishing_gradient / nonfinite_gradient: a scope a loss updates gets a zero
  gradient at the last VANISHING_STEPS recorded steps, or a NaN/Inf gradient
  at NONFINITE_STEPS recorded steps or more (steps the loss scaler skipped
  do not count).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.format.flowgraph import MIXED, TRAINABLE
from tb_gradscope.read import anomalies, leaks
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


def _fight_is_a_question(flow: Flow, loss: str, other: str, scope: str) -> bool:
    """Whether "should `loss` only read `scope`?" is worth asking: both losses
    train scopes of their own (two heads on one trunk), and the scope is not
    named after `loss` or its role. A loss all of whose scopes the other also
    trains is an objective of that same network, whose purpose is to pull it
    (distillation on the student, a commitment term on a VQ encoder, a
    regulariser), and a critic whose head the actor's gradient reaches is no
    intruder in its own head: the advice to cut it would break the design."""
    if not flow.own(loss) or not flow.own(other):
        return False
    return not leaks.named_after(scope, loss)


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
            if not _fight_is_a_question(flow, loss, other, scope):
                continue
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


def never_trained(flow: Flow, targets: Sequence[str] = ()) -> list[Finding]:
    """Scopes a loss's gradient reaches that nothing ever trains.

    Each condition is evidence, none a guess: the gradient arrives (or the
    FlowGraph says it reaches), no loss updates the scope and the FlowGraph's
    optimizer steps write none of its variables (without a FlowGraph: the
    measured update norm alone), its variables are trainable where the
    FlowGraph says, its recorded update norm is 0 at every recorded step (a
    step that did not measure it proves nothing), and no target or teacher
    holds it (`targets`: they move by assignment, never by an optimizer)."""
    graph, run = flow.graph, flow.run
    applied = set(graph.applied or []) if graph is not None else set()
    flagged: dict[str, list[str]] = {}
    for scope in flow.holders:
        if any(within(scope, t) or within(t, scope) for t in targets):
            continue
        reaching = [loss for loss in flow.losses if scope in flow.reached[loss]]
        if not reaching or scope in applied:
            continue
        if graph is not None:
            if any(scope in flow.updated[loss] for loss in flow.losses):
                continue
            if graph.trainable is not None and graph.trainability(scope) not in (TRAINABLE, MIXED):
                continue
        if _never_moved(run, scope):
            flagged[scope] = reaching
    found = []
    for scope in cover(flagged, flow.holders):
        inside = [h for h in flagged if within(h, scope)]
        losses = [loss for loss in flow.losses if any(loss in flagged[h] for h in inside)]
        loss = losses[0]
        steps = sorted({s for h in inside for s in flow.reached[loss].get(h, [])})
        real = [s for s in steps if s >= 0]
        found.append(
            Finding(
                kind=F.NEVER_TRAINED,
                what=f"'{scope}' never trains: the gradient of loss '{loss}' reaches it, but no optimizer "
                "step writes it and its update norm is 0 at every recorded step",
                loss=loss,
                scope=scope,
                evidence={
                    "reached_by": losses,
                    "update_norm_steps": _update_steps(run, inside),
                    **({"state": fmt.IGNORED} if graph is not None else {}),
                    **flow.norms(loss, scope, real),
                },
                why=f"'{loss}' is computed from '{scope}' as if it learned, but its weights stay where "
                "they were initialized: a head left out of the var_list, a variable the model does not "
                "track, or two models swapped (the one meant to learn held where the fixed one belongs)",
                fix=f"add the variables of '{scope}' to the var_list of the optimizer that '{loss}' feeds "
                "(a raw tf.Variable in a Keras layer: create it with add_weight so the model tracks it); "
                f"if '{scope}' is meant to stay fixed, compute it under tf.stop_gradient or create it "
                "with trainable=False",
                rule=str(rules_lib.Updates(loss, (f"{scope}/*",))),
                first_step=min(real, default=-1),
                last_step=max(real, default=-1),
                steps=len(real),
            )
        )
    return found


def _update_norms(run: RunLogs, scope: str) -> list[float]:
    """The scope's recorded update norms, one per recorded step that has its row."""
    out = []
    for step in run.updates:
        table = run.updates[step]
        if scope in table and "update_norm" in table.info.columns:
            out.append(table.row(scope)["update_norm"])
    return out


def _never_moved(run: RunLogs, scope: str) -> bool:
    """Measured at least once, and 0 at every step that measured it."""
    norms = [n for n in _update_norms(run, scope) if math.isfinite(n)]
    return bool(norms) and all(n == 0 for n in norms)


def _update_steps(run: RunLogs, scopes: Iterable[str]) -> int:
    return max((len(_update_norms(run, s)) for s in scopes), default=0)


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
