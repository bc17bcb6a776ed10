"""Checks rules against what a run shows: the FlowGraph (trace time) and the
gradient tables of a recorded step (run time). Each broken rule becomes a
violation Event whose evidence proves it.

Semantics (docs/RULES.md):
- never(loss, scope): the loss must never *update* the scope. At trace time
  broken when a matching scope's state is `updates`; `ignored` (the gradient
  reaches it but the optimizer does not apply it, e.g. seed 01's `var_list`)
  keeps the rule. At a step broken when a matching scope received a gradient
  (grad_vars > 0) whose L2 norm is not 0 (NaN counts as reaching), unless the
  FlowGraph says the cell is `ignored`; a roll-up over an ignored scope is
  not reported (its norm sums a gradient no optimizer applies): its
  children that break the rule are. Use blocked() to demand the cut itself.
- only(loss, scopes): the same test on every scope no pattern allows.
- blocked(loss, scope): at trace time broken unless the state is `blocked`;
  at a step broken when gradient reaches a matching scope.
- blocked(loss, scope, except_via=[...]): broken at trace time when the scope
  graph has a path from the scope to the loss, through no excepted scope, on
  edges not cut for the loss (or has no such path at all: nothing to cut);
  not checked on gradient tables, which cannot tell paths apart.
- updates(loss, scopes): the positive rule. At trace time broken on every
  matching scope whose state is not `updates` (ignored, blocked,
  independent); at a step broken on every matching scope that received no
  gradient (grad_vars 0 or an L2 norm of 0) or that the FlowGraph says the
  loss's optimizer does not write (`ignored`). A step that did not record the
  loss is not judged (a TD3 actor on every other step).
- A rule whose loss or scope patterns match nothing in the run is broken too:
  a typo must not pass CI silently.

Evidence always holds `at`: "trace" or "step". Tracks rules are checked on
drift series by `tb_gradscope.read.tracks`.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from tb_gradscope import format as fmt
from tb_gradscope import scopes as scopes_lib
from tb_gradscope.format.metadata import recorded_stat
from tb_gradscope.rules.model import (
    Blocked,
    Only,
    Rule,
    Tracks,
    Updates,
    loss_matches,
    outermost,
    scope_matches,
)
from tb_gradscope.rules.paths import gradient_path, loss_node_id, path_avoiding

# What a violation's evidence["cause"] says is wrong, and so which fix its message names.
CAUSE_MISSING_CUT = "missing_stop_gradient"  # no cut on the path: wrap it in tf.stop_gradient
CAUSE_OPTIMIZER_SCOPE = (
    "optimizer_scope"  # the path is needed; the loss's optimizer must not write the scope
)

REACHING_STATES = (fmt.UPDATES, fmt.IGNORED)
APPLIED_STATES = (fmt.UPDATES,)
TRACE, STEP = "trace", "step"


def check_flowgraph(
    rules: Iterable[Rule], flowgraph: fmt.FlowGraph, step: int = 0
) -> list[fmt.Event]:
    """Trace-time violations: rules broken by the static flow states of `flowgraph`."""
    events: list[fmt.Event] = []
    losses = list(flowgraph.cells)
    for rule in rules:
        if isinstance(rule, Tracks):
            continue
        matched = [loss for loss in losses if loss_matches(loss, rule.loss)]
        unmatched = _unmatched(rule, matched, losses, flowgraph.scopes, step, TRACE)
        if unmatched:
            events.append(unmatched)
            continue
        if isinstance(rule, Blocked) and rule.except_via:
            events += path_rule_events(rule, matched, flowgraph, step)
            continue
        for loss in matched:
            row = flowgraph.cells[loss]
            for scope in outermost(_broken_statically(rule, row)):
                events.append(_static_event(rule, loss, scope, row[scope], flowgraph, step))
    return events


def check_stats(
    rules: Iterable[Rule],
    step: int,
    grads: Mapping[str, fmt.Table],
    updates: fmt.Table | None = None,
    flowgraph: fmt.FlowGraph | None = None,
) -> list[fmt.Event]:
    """Run-time violations at a recorded step.

    Args:
      rules: the rules to check (Tracks rules are skipped here).
      step: the recorded step.
      grads: {loss: grad_stats table at `step`}.
      updates: the update_stats table at `step`, if recorded; its update norm
        is added to the evidence.
      flowgraph: if given, a blocked rule whose gradient does not arrive is
        still broken when the FlowGraph does not show the cut, and evidence
        names the un-cut path.
    """
    events: list[fmt.Event] = []
    losses = list(grads)
    for rule in rules:
        if isinstance(rule, Tracks):
            continue
        matched = [loss for loss in losses if loss_matches(loss, rule.loss)]
        scopes = list(dict.fromkeys(s for loss in matched for s in grads[loss].info.scopes))
        unmatched = _unmatched(rule, matched, losses, scopes or _all_scopes(grads), step, STEP)
        if unmatched:
            events.append(unmatched)
            continue
        if isinstance(rule, Blocked) and rule.except_via:
            continue  # about paths: the FlowGraph says (check_flowgraph), the tables cannot
        if isinstance(rule, Updates):
            for loss in matched:
                events += _updates_events(rule, loss, grads[loss], updates, flowgraph, step)
            continue
        for loss in matched:
            table = grads[loss]
            reached = _reached(rule, table)
            if not isinstance(rule, Blocked) and flowgraph is not None and loss in flowgraph.cells:
                row = flowgraph.cells[loss]
                dropped = [s for s in row if row[s] == fmt.IGNORED]
                # A roll-up over an ignored scope sums a gradient no optimizer
                # applies: its children that break the rule are reported instead.
                reached = [
                    s
                    for s in reached
                    if row.get(s) != fmt.IGNORED and not any(_within(d, s) for d in dropped)
                ]
            for scope in outermost(reached):
                events.append(
                    _step_event(rule, loss, scope, table.row(scope), updates, flowgraph, step)
                )
            if isinstance(rule, Blocked) and flowgraph is not None and loss in flowgraph.cells:
                row = flowgraph.cells[loss]
                quiet = [s for s in _broken_statically(rule, row) if s not in reached]
                for scope in outermost(quiet):
                    events.append(
                        _static_event(rule, loss, scope, row[scope], flowgraph, step, STEP)
                    )
    return events


def _all_scopes(grads: Mapping[str, fmt.Table]) -> list[str]:
    return list(dict.fromkeys(s for t in grads.values() for s in t.info.scopes))


def _candidates(rule: Rule, scopes: Sequence[str]) -> list[str]:
    """The scopes a rule constrains."""
    return list(_constrained(rule, tuple(scopes)))


@functools.lru_cache(maxsize=4096)
def _constrained(rule: Rule, scopes: tuple[str, ...]) -> tuple[str, ...]:
    """Cached per (rule, table layout): every recorded step shares its layout."""
    if isinstance(rule, Updates):
        return tuple(s for s in scopes if rule.requires(s))
    if isinstance(rule, Only):
        allowed = {s for s in scopes if any(rule.allows(a) for a in scopes_lib.ancestors(s))}
        holders = {a for s in allowed for a in scopes_lib.ancestors(s)[:-1]}
        return tuple(s for s in scopes if s not in allowed and s not in holders)
    return tuple(s for s in scopes if scope_matches(s, rule.scope))


@functools.lru_cache(maxsize=4096)
def _constrained_rows(rule: Rule, scopes: tuple[str, ...]) -> np.ndarray:
    wanted = set(_constrained(rule, scopes))
    return np.array([i for i, s in enumerate(scopes) if s in wanted], dtype=np.int64)


def _reached(rule: Rule, table: fmt.Table) -> list[str]:
    """Constrained scopes of `table` that received a gradient whose L2 norm is
    not 0 (NaN counts as reaching), vectorised over rows."""
    rows = _constrained_rows(rule, table.info.scopes)
    if not len(rows):
        return []
    grad_vars = table.column("grad_vars")[rows]
    l2 = table.column("l2")[rows]
    hit = ((grad_vars > 0) | np.isnan(grad_vars)) & (l2 != 0)
    return [table.info.scopes[i] for i in rows[hit]]


def _broken_statically(rule: Rule, row: Mapping[str, str]) -> list[str]:
    candidates = _candidates(rule, list(row))
    if isinstance(rule, Updates):
        return [s for s in candidates if row[s] != fmt.UPDATES]
    if isinstance(rule, Blocked):
        return [s for s in candidates if row[s] != fmt.BLOCKED]
    return [s for s in candidates if row[s] in APPLIED_STATES]


def _unmatched(
    rule: Rule, matched: list[str], losses: list[str], scopes: Sequence[str], step: int, at: str
) -> fmt.Event | None:
    if not matched:
        return fmt.Event(
            type=fmt.VIOLATION,
            name=str(rule),
            step=step,
            message=f"rule names loss '{rule.loss}' but the run has losses {sorted(losses)}; fix the rule's loss name",
            loss=rule.loss,
            evidence={"at": at, "unmatched": "loss", "losses": sorted(losses)},
        )
    patterns = rule.scopes if isinstance(rule, (Only, Updates)) else (rule.scope,)
    if not _any_match(patterns, tuple(scopes)):
        shown = ", ".join(list(scopes)[:12]) + (", ..." if len(scopes) > 12 else "")
        return fmt.Event(
            type=fmt.VIOLATION,
            name=str(rule),
            step=step,
            message=f"scope pattern {', '.join(patterns)} matches no scope of the run ({shown}); fix the pattern",
            loss=rule.loss,
            scope=patterns[0],
            evidence={"at": at, "unmatched": "scope"},
        )
    return None


@functools.lru_cache(maxsize=4096)
def _any_match(patterns: tuple[str, ...], scopes: tuple[str, ...]) -> bool:
    return any(scope_matches(s, p) for s in scopes for p in patterns)


def _static_event(
    rule: Rule,
    loss: str,
    scope: str,
    state: str,
    flowgraph: fmt.FlowGraph,
    step: int,
    at: str = TRACE,
) -> fmt.Event:
    evidence: dict = {"at": at, "state": state}
    if isinstance(rule, Updates):
        message = _not_updated(loss, scope, state)
    elif state in REACHING_STATES:
        message = f"loss '{loss}' reaches scope '{scope}' (state {state})" + _add_path(
            evidence, flowgraph, loss, scope, rule
        )
    elif state == fmt.INDEPENDENT:
        message = f"loss '{loss}' does not depend on scope '{scope}' at all (state independent), so nothing is blocked"
    else:
        message = f"loss '{loss}' has state {state} on scope '{scope}'"
    return fmt.Event(
        type=fmt.VIOLATION,
        name=str(rule),
        step=step,
        message=message,
        loss=loss,
        scope=scope,
        evidence=evidence,
    )


def _step_event(
    rule: Rule,
    loss: str,
    scope: str,
    row: Mapping[str, float],
    updates: fmt.Table | None,
    flowgraph: fmt.FlowGraph | None,
    step: int,
) -> fmt.Event:
    evidence: dict = {"at": STEP, "l2": row.get("l2"), "grad_vars": int(row.get("grad_vars", 0))}
    max_abs = recorded_stat(row, "max_abs")  # None when not recorded (grad_columns=): no evidence
    if max_abs is not None:
        evidence["max_abs"] = max_abs
    if "nonfinite" in row:
        evidence["nonfinite"] = row["nonfinite"]
    if updates is not None and scope in updates:
        evidence["update_norm"] = updates.row(scope).get("update_norm")
    message = f"loss '{loss}' reaches scope '{scope}' with gradient norm {row.get('l2'):.4g}"
    if flowgraph is not None and loss in flowgraph.cells:
        message += _add_path(evidence, flowgraph, loss, scope, rule)
    return fmt.Event(
        type=fmt.VIOLATION,
        name=str(rule),
        step=step,
        message=message,
        loss=loss,
        scope=scope,
        evidence=evidence,
    )


def _not_updated(loss: str, scope: str, state: str) -> str:
    """Why `loss` does not update `scope`, by the cell's state, and what to do."""
    if state == fmt.IGNORED:
        return (
            f"loss '{loss}' does not update scope '{scope}' (state ignored): its gradient reaches the "
            f"scope but no optimizer step fed by '{loss}' writes it; add '{scope}' to that optimizer's "
            "var_list (and make its variables trainable and tracked by the model)"
        )
    if state == fmt.BLOCKED:
        return (
            f"loss '{loss}' does not update scope '{scope}' (state blocked): every gradient path into it "
            "is cut; remove the cut (tf.stop_gradient, or reading it before the tape opens) if it should train"
        )
    if state == fmt.INDEPENDENT:
        return f"loss '{loss}' does not depend on scope '{scope}' at all (state independent), so it cannot train it"
    return f"loss '{loss}' does not update scope '{scope}' (state {state})"


def _updates_events(
    rule: Updates,
    loss: str,
    table: fmt.Table,
    updates: fmt.Table | None,
    flowgraph: fmt.FlowGraph | None,
    step: int,
) -> list[fmt.Event]:
    """Violations of an `updates` rule at one recorded step of `loss`: every
    matching row without a gradient, or one the FlowGraph says is ignored."""
    rows = _constrained_rows(rule, table.info.scopes)
    if not len(rows):
        return []
    grad_vars = table.column("grad_vars")[rows]
    l2 = table.column("l2")[rows]
    arrived = ((grad_vars > 0) | np.isnan(grad_vars)) & (l2 != 0)
    static = flowgraph.cells.get(loss, {}) if flowgraph is not None else {}
    broken = []
    for i, ok in zip(rows.tolist(), arrived.tolist()):
        scope = table.info.scopes[i]
        if not ok or static.get(scope) == fmt.IGNORED:
            broken.append(scope)
    events = []
    for scope in outermost(broken):
        row = table.row(scope)
        evidence: dict = {
            "at": STEP,
            "l2": row.get("l2"),
            "grad_vars": int(row.get("grad_vars", 0)),
        }
        if updates is not None and scope in updates:
            evidence["update_norm"] = updates.row(scope).get("update_norm")
        state = static.get(scope)
        if state == fmt.IGNORED:
            evidence["state"] = state
            message = _not_updated(loss, scope, state)
        else:
            message = (
                f"loss '{loss}' does not update scope '{scope}': no gradient of '{loss}' reached it at this step"
                + (f" (state at trace: {state})" if state else "")
            )
        events.append(
            fmt.Event(
                type=fmt.VIOLATION,
                name=str(rule),
                step=step,
                message=message,
                loss=loss,
                scope=scope,
                evidence=evidence,
            )
        )
    return events


def _cut_text(edge: fmt.BlockedEdge) -> str:
    return f"{edge.op_type} '{edge.op_name}' on {edge.producer_scope} -> {edge.consumer_scope}" + (
        f" at {edge.source.file}:{edge.source.line}" if edge.source else ""
    )


def _cuts_from(flowgraph: fmt.FlowGraph, loss: str, scope: str) -> list[fmt.BlockedEdge]:
    return [
        e for e in flowgraph.blocked_edges if e.loss == loss and _within(e.producer_scope, scope)
    ]


def _add_path(evidence: dict, flowgraph: fmt.FlowGraph, loss: str, scope: str, rule: Rule) -> str:
    """Adds the un-cut path, the missing cut and the cuts that do exist on the
    scope's other paths (op and source line) to `evidence`; returns the
    message tail."""
    path, cut = gradient_path(flowgraph, loss, scope)
    cuts = _cuts_from(flowgraph, loss, scope)
    existing = [_cut_text(e) for e in cuts]
    if existing:
        evidence["cuts"] = existing
    if path:
        evidence["path"] = path
    if not cut:
        return ""
    via = f" (path {' -> '.join(path)})" if len(path) > 2 else ""
    per_path = [e for e in cuts if e.open_path]
    if isinstance(rule, Blocked) and per_path:
        hint = _per_path_hint(evidence, rule, loss, scope, path, cut, per_path[0])
        return f"{hint}; to block every path, {_cut_fix(flowgraph, cut)}"
    if flowgraph.cells.get(loss, {}).get(scope) == fmt.UPDATES:
        reason = _optimizer_must_change(flowgraph, loss, scope, cut)
        if reason:
            evidence["cause"] = CAUSE_OPTIMIZER_SCOPE
            evidence["needed_by"] = reason[1]
            return (
                f"{via}: the optimizer step fed by loss '{loss}' writes scope '{scope}', {reason[0]}; "
                f"leave '{scope}' out of the {_words(flowgraph).scoped} of the optimizer that "
                f"minimizes loss '{loss}'"
            )
    evidence["cause"] = CAUSE_MISSING_CUT
    evidence["missing_cut"] = list(cut)
    also = f"; the cut at {existing[0]} does not cover it" if existing else ""
    return f": missing cut on {cut[0]} -> {cut[1]}{via}{also}; {_cut_fix(flowgraph, cut)}"


def _per_path_hint(
    evidence: dict,
    rule: Blocked,
    loss: str,
    scope: str,
    path: list[str],
    cut: tuple[str, str],
    edge: fmt.BlockedEdge,
) -> str:
    """A plain blocked(...) on a scope that a per-path cut already cuts on one
    path (SimSiam's stop_gradient branch) and the loss reaches by another: say
    both, and the rule that pins only the cut path."""
    via_scope = _top_outside(cut[1], scope)
    suggested = Blocked(rule.loss, rule.scope, (via_scope,)) if via_scope else None
    evidence["cause"] = CAUSE_MISSING_CUT
    evidence["missing_cut"] = list(cut)
    tail = f" by the path {' -> '.join(path)}; the cut {_cut_text(edge)} blocks only another of its paths"
    if suggested is not None:
        evidence["suggested_rule"] = str(suggested)
        tail += (
            f". If the gradient through {via_scope} is intended, write {suggested} to pin that cut"
        )
    return tail


def _top_outside(node: str, scope: str) -> str:
    """The outermost ancestor of scope-graph node `node` that holds no part of
    `scope` ("" for a loss or input node)."""
    if node.startswith(("loss:", "input:")):
        return ""
    for ancestor in scopes_lib.ancestors(node):
        if not _within(scope, ancestor) and not _within(ancestor, scope):
            return ancestor
    return ""


def path_rule_events(
    rule: Blocked, losses: Sequence[str], flowgraph: fmt.FlowGraph, step: int
) -> list[fmt.Event]:
    """Violations of `blocked(loss, scope, except_via=...)` over the scope graph:
    an open path avoiding the excepted scopes, or no such path to cut at all."""
    shown = ", ".join(rule.except_via)
    if not flowgraph.path_cuts:
        return [
            fmt.Event(
                type=fmt.VIOLATION,
                name=str(rule),
                step=step,
                loss=rule.loss,
                scope=rule.scope,
                message=(
                    "cannot be checked: this FlowGraph was written before tb-gradscope recorded per-path cuts, "
                    "so a cut on one path is not in it; record the run again with this tb-gradscope"
                ),
                evidence={"at": TRACE, "unchecked": "path_cuts"},
            )
        ]
    if not _any_match(rule.except_via, tuple(flowgraph.scopes)):
        return [
            fmt.Event(
                type=fmt.VIOLATION,
                name=str(rule),
                step=step,
                loss=rule.loss,
                scope=rule.scope,
                message=f"except_via pattern {shown} matches no scope of the run; fix the pattern",
                evidence={"at": TRACE, "unmatched": "except_via"},
            )
        ]
    events = []
    for loss in losses:
        row = flowgraph.cells[loss]
        for scope in outermost(_candidates(rule, list(row))):
            evidence: dict = {"at": TRACE, "state": row[scope]}
            path, cut = path_avoiding(flowgraph, loss, scope, rule.except_via)
            if path and cut:
                evidence.update(path=path, cause=CAUSE_MISSING_CUT, missing_cut=list(cut))
                cuts = [_cut_text(e) for e in _cuts_from(flowgraph, loss, scope)]
                if cuts:
                    evidence["cuts"] = cuts
                also = f"; the cut at {cuts[0]} does not cover it" if cuts else ""
                message = (
                    f"loss '{loss}' reaches scope '{scope}' by a path that does not pass through {shown} "
                    f"({' -> '.join(path)}): missing cut on {cut[0]} -> {cut[1]}{also}; "
                    f"{_cut_fix(flowgraph, cut)}"
                )
            elif (
                row[scope] == fmt.INDEPENDENT
                or not path_avoiding(flowgraph, loss, scope, rule.except_via, False)[0]
            ):
                message = (
                    f"loss '{loss}' depends on scope '{scope}' only through {shown} (state {row[scope]}): "
                    "there is no other path, so no cut to keep"
                )
            else:
                continue
            events.append(
                fmt.Event(
                    type=fmt.VIOLATION,
                    name=str(rule),
                    step=step,
                    message=message,
                    loss=loss,
                    scope=scope,
                    evidence=evidence,
                )
            )
    return events


def _optimizer_must_change(
    flowgraph: fmt.FlowGraph, loss: str, scope: str, cut: tuple[str, str]
) -> tuple[str, list[str]] | None:
    """Why the fix for `loss` updating `scope` is its optimizer's variables, not
    a cut: (the reason, the losses that need the path or own the scope), or
    None when a stop_gradient is the fix.

    - the cut edge carries this loss's own gradient on to a scope it rightly
      updates (a GAN's generator loss through the discriminator, TD3's actor
      through the critic): a stop_gradient would starve it;
    - another loss trains the scope with an optimizer of its own (seed 01's
      heads, a DDPG critic): the scope is not this optimizer's to write.
    A scope trained by another loss through the *same* optimizer step (one
    summed loss, a shared-trunk actor-critic), or by optimizers the analysis
    did not see (`testing.trace_flow`), keeps the stop_gradient advice.
    """
    mine = _optimizer(flowgraph, loss)
    target = loss_node_id(flowgraph, loss)
    row = flowgraph.cells.get(loss, {})
    starved = [
        s
        for s, state in row.items()
        if state == fmt.UPDATES
        and not _within(s, scope)
        and not _within(scope, s)
        and _reaches(flowgraph, s, target, loss)
        and not _reaches(flowgraph, s, target, loss, without=cut)
    ]
    if starved:
        shown = ", ".join(repr(s) for s in outermost(starved)[:3])
        return (
            f"and a {_words(flowgraph).cutter} on {cut[0]} -> {cut[1]} would also cut its gradient "
            f"into {shown}",
            [loss],
        )
    others = sorted(
        o for o, r in flowgraph.cells.items() if o != loss and r.get(scope) == fmt.UPDATES
    )
    if not others:
        return None
    if not mine or any(_optimizer(flowgraph, o) in ("", mine) for o in others):
        return None  # the same optimizer step (or no optimizer seen): cut the path
    owners = ", ".join(repr(o) for o in others)
    return (f"which loss {owners} trains with an optimizer of its own", others)


@dataclasses.dataclass(frozen=True)
class _Words:
    """How the framework that traced a run (`FlowGraph.source`) says a fix."""

    cutter: str  # what cuts a path
    cut_fix: str  # the missing cut's fix ({src}, {dst}: the scope-graph edge)
    scoped: str  # what limits an optimizer to some variables


_TF_WORDS = _Words(
    "tf.stop_gradient",
    "wrap the tensor leaving {src} in tf.stop_gradient where {dst} reads it",
    "var_list",
)
_TORCH_WORDS = _Words(
    ".detach()",
    "call .detach() on the tensor leaving {src} where {dst} reads it (or compute it under "
    "torch.no_grad())",
    "param groups",
)


def _words(flowgraph: fmt.FlowGraph) -> _Words:
    return _TORCH_WORDS if flowgraph.source == "torch" else _TF_WORDS


def _cut_fix(flowgraph: fmt.FlowGraph, cut: tuple[str, str]) -> str:
    return _words(flowgraph).cut_fix.format(src=cut[0], dst=cut[1])


def _optimizer(flowgraph: fmt.FlowGraph, loss: str) -> str:
    return next((info.optimizer for info in flowgraph.losses if info.name == loss), "")


def _within(scope: str, root: str) -> bool:
    return scope == root or scope.startswith(root + "/")


def _reaches(
    flowgraph: fmt.FlowGraph,
    start: str,
    target: str | None,
    loss: str,
    without: tuple[str, str] | None = None,
) -> bool:
    """Whether the scope graph leads from `start` to `target` on edges not cut
    for `loss` (leaving out the edge `without`)."""
    successors: dict[str, list[str]] = {}
    for edge in flowgraph.edges:
        if loss not in edge.blocked_for and (edge.src, edge.dst) != without:
            successors.setdefault(edge.src, []).append(edge.dst)
    seen, stack = {start}, [start]
    while stack:
        node = stack.pop()
        if node == target:
            return True
        for nxt in successors.get(node, ()):
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False
