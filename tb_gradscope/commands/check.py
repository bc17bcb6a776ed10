"""`tb-gradscope check LOGDIR [--rules FILE]`: fail CI when a flow rule is broken.

Exit status: 0 when no run shows a violation, 1 when any does (one line each:
run, step, rule, message, evidence), 2 on bad usage, a missing or unreadable
logdir, a logdir without gradscope data, a broken rules file, or a run none of
whose gradient tables could be read (nothing was checked there). Imports
TensorBoard only when it runs, so `--help` is instant; never tensorflow.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, TextIO

from tb_gradscope.commands.text import evidence, safe

if TYPE_CHECKING:
    from tb_gradscope.commands.evaluate import Finding

HELP = "exit 1 if any run breaks a flow rule (recorded, or given with --rules)"

OK, VIOLATED, USAGE = 0, 1, 2
UNREADABLE = 2  # what was asked could not be read (as for a missing logdir)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Checks flow rules over the gradscope logs in LOGDIR: the violations the "
        "runs recorded while training, plus the rules of --rules FILE and those "
        "each run recorded, evaluated against its FlowGraph (trace time), its "
        "gradient tables (every recorded step) and its drift series. Prints one "
        "line per violation (run, first step, rule, message, evidence)."
    )
    parser.epilog = (
        "exit status: 0 no violation, 1 any violation, 2 bad usage, unreadable "
        "logdir, no gradscope data, broken rules file, or a run whose gradient "
        "tables could not be read (not checked). Rules file format: "
        "docs/RULES.md."
    )
    parser.add_argument("logdir", metavar="LOGDIR", help="a TensorBoard logdir (one run per subdirectory)")
    parser.add_argument("--rules", metavar="FILE", help="a TOML rules file to check every run against")
    parser.add_argument("--run", metavar="RUN", dest="run_name", help="check only this run")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Runs the check; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    from tb_gradscope import rules as rules_lib
    from tb_gradscope.commands import evaluate, logs as logs_lib

    given: list = []
    if args.rules:
        try:
            given = list(rules_lib.parse_rules_file(args.rules).rules)
        except rules_lib.RulesFileError as e:
            print(f"tb-gradscope check: {safe(e)}", file=err)
            return USAGE
    try:
        runs = logs_lib.load_logdir(args.logdir, args.run_name)
    except logs_lib.LogdirError as e:
        print(f"tb-gradscope check: {safe(e)}", file=err)
        return USAGE
    per_run = {}
    any_rules = bool(given)
    for logs in runs:
        chosen, warnings = evaluate.run_rules(logs, given)
        any_rules = any_rules or bool(chosen)
        for warning in logs.warnings + warnings:
            print(f"warning: {safe(warning)}", file=err)
        per_run[logs.run] = evaluate.findings(logs.run, logs.events, evaluate.evaluate(logs, chosen))
    per_run, notes = evaluate.drop_inapplicable(per_run, given)
    for note in notes:
        print(f"note: {safe(note)}", file=err)
    found = [f for run in sorted(per_run) for f in per_run[run]]
    for finding in found:
        print(format_finding(finding), file=out)
    unreadable = [logs.run for logs in runs if logs.grads_unreadable]
    for name in unreadable:
        print(
            f"error: run {safe(name)}: not checked at any recorded step: none of its gradient "
            "tables could be read (the warnings above say why)",
            file=err,
        )
    checked = f"checked {len(runs)} run(s)"
    if unreadable:
        checked += f", {len(unreadable)} of them not at any recorded step"
    recorded_any = any(e.type == "violation" for logs in runs for e in logs.events)
    if not found and unreadable:
        print(f"{checked}: no violations in what could be read; exit {UNREADABLE}: the rest could not be checked", file=err)
        return UNREADABLE
    if not any_rules and not recorded_any:
        print(f"{checked}: no rules given and none recorded", file=err)
        return OK
    summary = f"{len(found)} violation(s)" if found else "no violations"
    print(f"{checked}: {summary}", file=err)
    return VIOLATED if found else OK


def format_finding(finding: Finding) -> str:
    """One line: `run  step S  rule  message  [evidence]  (N steps, last S2)`."""
    event = finding.event
    when = " (trace)" if event.evidence.get("at") == "trace" else ""
    line = f"{safe(finding.run)}  step {event.step}{when}  {safe(event.name)}  {safe(event.message)}"
    shown = evidence(event.evidence)
    if shown:
        line += f"  [{shown}]"
    if finding.count > 1:
        line += f"  ({finding.count} steps, last {finding.last_step})"
    if finding.source == "recorded":
        line += "  (recorded)"
    return line
