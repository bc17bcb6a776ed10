"""`tb-gradscope doctor LOGDIR`: what in each run is probably a bug, without rules.

Reads each run's records (FlowGraph, gradient tables, drift, conflict, events)
through TensorBoard's ingestion and prints the findings of
`tb_gradscope.read.findings.diagnose`: what, where, the evidence, why it is
probably a bug, the one-line fix and the rule that pins it in CI. A leak
(something trains what it must not, a broken target, a gradient gone bad) is
a finding; a hazard (a gradient reaches a trainable target or another loss's
value, but no optimizer step fed by it writes there today) is printed as a
note, and so is a question (a pattern that is a bug in one standard design
and correct in another, told apart only by names: SimSiam's encoder trained
past its predictor). A run without a FlowGraph is diagnosed on its gradient tables alone: a
warning says its findings are partial and how to get the full evidence. Exit
status: 0 no leak (notes and questions only, or nothing), 1 any leak (or any note, with
--strict), 2 bad usage, unreadable logdir, no gradscope data, or a run none
of whose gradient tables could be read. Imports TensorBoard only when it
runs; never tensorflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from tb_gradscope.commands.text import safe

if TYPE_CHECKING:
    from tb_gradscope.read.finding import Finding

HELP = "find what is probably a bug in each run (leaks, fighting losses, broken targets), no rules needed"

CLEAN, FOUND, UNREADABLE = 0, 1, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Diagnoses the gradscope logs in LOGDIR without rules or declared pairs: a loss "
        "that trains a target network, an actor that trains its critic, two optimizers "
        "writing one scope, a value read without stop_gradient, losses fighting over a "
        "scope, target/EMA pairs that do not follow, gradients that vanish or go "
        "non-finite and stay so. Each finding says what, where, the evidence, why it is "
        "probably a bug, the fix, and the rule that pins the fix in CI."
    )
    parser.epilog = (
        "exit status: 0 no leak (hazards and questions are notes), 1 any leak (or any note, with --strict), "
        "2 bad usage, unreadable logdir, no gradscope data, or a run whose gradient tables "
        "could not be read. docs/CLI.md lists every finding kind."
    )
    parser.add_argument(
        "logdir", metavar="LOGDIR", help="a TensorBoard logdir (one run per subdirectory)"
    )
    parser.add_argument("--run", metavar="RUN", dest="run_name", help="diagnose only this run")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 on hazards too (a gradient reaching a trainable target or another "
        "loss's value that no optimizer step applies today)",
    )


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Prints each run's findings; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    from tb_gradscope.read import finding as F
    from tb_gradscope.read import logdir
    from tb_gradscope.read.findings import diagnose, partial_warning

    try:
        runs = logdir.load_logdir(args.logdir, args.run_name)
    except logdir.LogdirError as e:
        print(f"tb-gradscope doctor: {safe(e)}", file=err)
        return UNREADABLE
    per_run, partial = {}, {}
    for logs in runs:
        per_run[logs.run] = diagnose(logs)
        partial[logs.run] = partial_warning(logs)
    for logs in runs:
        for warning in logs.warnings + ([partial[logs.run]] if partial[logs.run] else []):
            print(f"warning: {safe(warning)}", file=err)
    if args.format == "json":
        document = {
            "logdir": args.logdir,
            "runs": [
                {
                    "run": name,
                    "findings": [f.to_json() for f in found],
                    "partial": bool(partial[name]),
                    "warnings": [partial[name]] if partial[name] else [],
                }
                for name, found in per_run.items()
            ],
        }
        json.dump(document, out, indent=1, ensure_ascii=True, allow_nan=False)
        out.write("\n")
    else:
        out.write("\n\n".join(render_run(name, found) for name, found in per_run.items()) + "\n")
    unreadable = [logs.run for logs in runs if logs.grads_unreadable]
    for name in unreadable:
        print(
            f"error: run {safe(name)}: not diagnosed: none of its gradient tables could be read "
            "(the warnings above say why)",
            file=err,
        )
    strict = getattr(args, "strict", False)  # a caller's Namespace may lack --strict
    every = [f for found in per_run.values() for f in found]
    leaks = [f for f in every if f.severity == F.LEAK]
    summary = f"diagnosed {len(runs)} run(s): {len(leaks)} finding(s)"
    if len(every) > len(leaks):
        summary += f", {len(every) - len(leaks)} note(s) (hazards and questions{'' if strict else '; exit 1 on them with --strict'})"
    print(summary, file=err)
    if unreadable and not every:
        return UNREADABLE
    return FOUND if (every if strict else leaks) else CLEAN


def render_run(run: str, found: list[Finding]) -> str:
    """One run's findings as text."""
    if not found:
        return f"run {safe(run)}: no findings"
    from tb_gradscope.read.finding import HAZARD, LEAK, QUESTION

    notes = sum(1 for f in found if f.severity != LEAK)
    head = f"run {safe(run)}: {len(found) - notes} finding(s)"
    lines = [head + (f", {notes} note(s)" if notes else "")]
    for i, f in enumerate(found, 1):
        label = {HAZARD: "note: hazard, ", QUESTION: "question: "}.get(f.severity, "")
        partial = " (partial: no FlowGraph)" if f.partial else ""
        lines += ["", f"{i}. [{f.kind}] {label}{safe(f.what)}{partial}"]
        where = [
            f"loss {safe(f.loss)}" if f.loss else "",
            f"scope {safe(f.scope)}",
            f"pair {safe(f.pair)}" if f.pair else "",
            f"edge {safe(f.edge)}" if f.edge else "",
        ]
        lines.append("   where:    " + ", ".join(w for w in where if w))
        lines.append(f"   evidence: {f.evidence_line()}")
        lines.append(f"   why:      {safe(f.why)}")
        lines.append(f"   fix:      {safe(f.fix)}")
        lines.append(
            f"   rule:     {safe(f.rule)}" if f.rule else "   rule:     (no rule kind expresses it)"
        )
    return "\n".join(lines)
