"""`tb-gradscope check LOGDIR [--rules FILE]`: fail CI when a flow rule is broken.

Exit status: 0 when no run shows a violation, 1 when any does (one line per
broken rule: run, rule, when (at trace, at N steps), message, evidence, the
rules it implies; or one JSON document with `--format json`), 2 on bad usage,
a missing or unreadable logdir, a logdir without gradscope data, a broken
rules file, a run none of whose gradient tables could be read (nothing was
checked there), or rules (given or recorded) none of which had anything to
check in any run (no recorded step, FlowGraph or drift series holds what they
name: never a silent pass). The
violations come from `tb_gradscope.read.violations`, which the plugin's
violations route (the tab's Violations panel) calls too. Imports TensorBoard
only when it runs, so `--help` is instant; never tensorflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, TextIO

from tb_gradscope.commands.text import evidence, safe

if TYPE_CHECKING:
    from tb_gradscope.read.violations import Violation

HELP = "exit 1 if any run breaks a flow rule (recorded, or given with --rules)"

OK, VIOLATED, USAGE = 0, 1, 2
UNREADABLE = 2  # what was asked could not be read (as for a missing logdir)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Checks flow rules over the gradscope logs in LOGDIR: the violations the "
        "runs recorded while training, plus the rules of --rules FILE and those "
        "each run recorded, evaluated against its FlowGraph (trace time), its "
        "gradient tables (every recorded step) and its drift series. Prints one "
        "line per broken rule (run, rule, when, message, evidence, rules it implies)."
    )
    parser.epilog = (
        "exit status: 0 no violation, 1 any violation, 2 bad usage, unreadable "
        "logdir, no gradscope data, broken rules file, a run whose gradient "
        "tables could not be read (not checked), or rules none of which any "
        "recorded step could check. Rules file format: docs/RULES.md."
    )
    parser.add_argument(
        "logdir", metavar="LOGDIR", help="a TensorBoard logdir (one run per subdirectory)"
    )
    parser.add_argument(
        "--rules", metavar="FILE", help="a TOML rules file to check every run against"
    )
    parser.add_argument("--run", metavar="RUN", dest="run_name", help="check only this run")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Runs the check; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    from tb_gradscope import rules as rules_lib
    from tb_gradscope.read import logdir, violations

    given: list = []
    if args.rules:
        try:
            given = list(rules_lib.parse_rules_file(args.rules).rules)
        except rules_lib.RulesFileError as e:
            print(f"tb-gradscope check: {safe(e)}", file=err)
            return USAGE
    try:
        runs = logdir.load_logdir(args.logdir, args.run_name)
    except logdir.LogdirError as e:
        print(f"tb-gradscope check: {safe(e)}", file=err)
        return USAGE
    checked_runs = {}
    for logs in runs:
        checked_runs[logs.run] = violations.check_run(logs, given)
        for warning in logs.warnings + checked_runs[logs.run].warnings:
            print(f"warning: {safe(warning)}", file=err)
    any_rules = bool(given) or any(c.rules for c in checked_runs.values())
    per_run, notes = violations.drop_inapplicable(
        {run: c.violations for run, c in checked_runs.items()}, given
    )
    for note in notes:
        print(f"note: {safe(note)}", file=err)
    found = [v for run in sorted(per_run) for v in per_run[run]]
    if getattr(args, "format", "text") == "json":  # a caller's Namespace may lack --format
        document = {
            "logdir": args.logdir,
            "runs": [
                {
                    "run": run,
                    "rules": [str(r) for r in checked_runs[run].rules],
                    "violations": [v.to_json() for v in per_run[run]],
                    "warnings": checked_runs[run].warnings,
                }
                for run in sorted(per_run)
            ],
        }
        json.dump(document, out, indent=1, ensure_ascii=True, allow_nan=False)
        out.write("\n")
    else:
        for violation in found:
            print(format_violation(violation), file=out)
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
        print(
            f"{checked}: no violations in what could be read; exit {UNREADABLE}: the rest could not be checked",
            file=err,
        )
        return UNREADABLE
    if not any_rules and not recorded_any:
        print(f"{checked}: no rules given and none recorded", file=err)
        return OK
    if not recorded_any and not any(c.checked for c in checked_runs.values()):
        print(
            f"{checked}: rules were given but no recorded step could check them (the lines above say what "
            f"each one names that no run recorded); exit {UNREADABLE}: nothing was checked",
            file=err,
        )
        return UNREADABLE
    summary = f"{len(found)} violation(s)" if found else "no violations"
    print(f"{checked}: {summary}", file=err)
    return VIOLATED if found else OK


def format_violation(violation: Violation) -> str:
    """One line per broken rule: `run  rule  when  message  [evidence]  (recorded; also breaks ...)`."""
    event = violation.event
    line = f"{safe(violation.run)}  {safe(event.name)}  {violation.when}  {safe(event.message)}"
    shown = evidence(event.evidence)
    if shown:
        line += f"  [{shown}]"
    notes = [violation.source] if violation.source == "recorded" else []
    if violation.also_breaks:
        notes.append("also breaks " + ", ".join(safe(name) for name in violation.also_breaks))
    if notes:
        line += f"  ({'; '.join(notes)})"
    return line
