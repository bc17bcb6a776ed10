"""The diagnosis: what in a run is probably a bug, found without rules or declared pairs.

    found = diagnose(run)   # run: a read.runs.RunLogs; the caller keeps the answer

Runs every detector over what the run recorded (FlowGraph, gradient tables,
drift, conflict, events) and returns each finding once, most specific first:
measured gradients that contradict the FlowGraph (`read/measured.py`: the
measurement wins), leaks into targets, between losses (`read/leaks.py`; a
loss that repeats its mirror's pull: `read/mirrored.py`),
then the numbers and parts that never train (`read/health.py`), then the
questions only names can answer (`read/questions.py`, never a leak). `tb-gradscope doctor` and the plugin's findings route both
call it, so the command line and the tab cannot disagree. Each detector is
justified by the correctness corpus (docs/CORRECTNESS.md): it fires on no
correct shape, and every mutant gets a finding naming its loss and scope.
Never imports tensorflow.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from tb_gradscope import rules as rules_lib
from tb_gradscope.read import finding as F
from tb_gradscope.read import health, leaks, measured, mirrored, questions
from tb_gradscope.read.finding import Finding
from tb_gradscope.read.flow import Flow, within
from tb_gradscope.read.targets import targets

if TYPE_CHECKING:
    from tb_gradscope.read.runs import RunLogs

__all__ = ["Finding", "KINDS", "NO_FLOWGRAPH", "diagnose", "partial_warning"]

KINDS = F.KINDS

# What a diagnosis without a FlowGraph misses, and how to get it (the
# counterpart of `read.violations.NO_FLOWGRAPH`, which says it for rules).
NO_FLOWGRAPH = (
    "run {run!r} has no FlowGraph (its training step was never traced, e.g. an eager loop): "
    "its findings are partial, read off its gradient tables alone: a cut cannot be told from no "
    "dependence, nor a scope outside the optimizer's variables (ignored) from one it updates, and "
    "which scope reads which is known only by name; trace the step once with "
    "rec.analyze(step_fn, *example_args), or run it in tf.function, for the full evidence"
)


def diagnose(run: RunLogs) -> list[Finding]:
    """Every finding of one run, leaks first, then by step, loss and scope."""
    found_targets = targets(run)
    flow = Flow(run, [t.root for t in found_targets])
    # Measured gradients outrank the FlowGraph: a cell it calls cut that a
    # gradient reached is reported first, and no detector reasons from its cut.
    leaked = measured.contradicted(flow)
    contradicted = [(f.loss, f.scope) for f in leaked]
    roots = [t.root for t in found_targets]
    twins = mirrored.mirrored(flow, exclude=roots)
    contradicted += [(f.loss, f.scope) for f in twins]
    leaked += twins + [
        f
        for f in leaks.target_trained(flow, found_targets)
        + leaks.target_not_cut(flow, found_targets)
        + leaks.cross_loss(flow, exclude=roots)
        if not any(f.loss == loss and within(f.scope, s) for loss, s in contradicted)
    ]
    taken = [(f.loss, f.scope) for f in leaked]
    # A leak from one loss into another's scope (an advantage without
    # stop_gradient) makes the two fight over the trunk they share: the leak
    # is the finding; a fight beside it would propose cutting the trunk off
    # one of them, which the fix does not do.
    explained = [(f.loss, f.evidence["other_loss"]) for f in leaked if f.evidence.get("other_loss")]
    found = leaked + health.losses_fighting(flow, taken, explained)
    found += questions.predictor_bypassed(flow)
    trained_targets = [f.scope for f in leaked if f.kind == F.TARGET_TRAINED]
    for anomaly in health.pair_anomalies(run):
        if anomaly.evidence.get("anomaly") == "moved_by_optimizer" and any(
            within(t, anomaly.scope) or within(anomaly.scope, t) for t in trained_targets
        ):
            continue  # the target_trained finding names the loss that moves it
        found.append(anomaly)
    found += health.never_trained(flow, [t.root for t in found_targets])
    found += health.numeric(flow)
    found = _vetted(found, flow, found_targets)
    if run.grads and not run.flowgraphs:
        found = [dataclasses.replace(f, partial=True) for f in found]
    return sorted(found, key=lambda f: (KINDS.index(f.kind), f.first_step, f.loss, f.scope))


def _vetted(found: list[Finding], flow: Flow, found_targets: list) -> list[Finding]:
    """Every proposed rule held against the standard designs it could break
    before it is shown: a rule that forbids a loss the scope named after its
    own role (the critic its value head), or forbids a loss that reads a
    teacher the student that teacher guides (distillation itself), would
    break a correct design. Such a finding is only a question, without a
    rule."""
    out = []
    for f in found:
        rule = rules_lib.parse_rule(f.rule) if f.rule.startswith(("never(", "blocked(")) else None
        if rule is not None and _breaks_a_design(
            rule.loss, rule.scope.removesuffix("/*"), flow, found_targets
        ):
            f = dataclasses.replace(
                f,
                severity=F.QUESTION,
                rule="",
                fix=f.fix + " (only if this loss is not meant to train it: its own head, or a "
                "student its teacher guides, is a design)",
            )
        out.append(f)
    return out


def _breaks_a_design(loss: str, scope: str, flow: Flow, found_targets: list) -> bool:
    if leaks.named_after(scope, loss):
        return True
    return any(
        t.teacher
        and t.online
        and within(scope, t.online)
        and any(within(h, t.root) for h in flow.reached.get(loss, {}))
        for t in found_targets
    )


def partial_warning(run: RunLogs) -> str | None:
    """The warning a diagnosis on gradient tables alone deserves (a run that
    never wrote a FlowGraph), with the way to get the full evidence; None
    when the run has a FlowGraph (or nothing at all)."""
    if not run.grads or run.flowgraphs:
        return None
    return NO_FLOWGRAPH.format(run=run.run)
