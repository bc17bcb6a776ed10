"""`tb-gradscope report LOGDIR`: what each run's gradient flow looks like, in text or JSON.

Per run: the loss x scope flow-state table with gradient norms at one recorded
step (by default each loss at its latest recorded step), blocked edges with
their source lines, each pair's drift at that step, anomalies and violations. Reads through TensorBoard's ingestion (imported only
when the command runs) and never imports tensorflow.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, TextIO

from tb_gradscope.commands.text import evidence, number, safe
from tb_gradscope.read.evidence import blocked_fix, blocked_line

HELP = "print each run's loss x scope flow table, blocked edges, drift and violations"

OK, USAGE = 0, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        "Summarises the gradscope logs in LOGDIR, per run: the flow state of every "
        "(loss, scope) cell with its gradient L2 norm at one recorded step, blocked "
        "edges with the source line that cut them, the drift of each "
        "target/online pair at that step, anomalies, and violations (recorded ones, plus the "
        "rules of --rules FILE and those the run recorded, evaluated over all steps)."
    )
    parser.epilog = (
        "exit status: 0 on success, 2 on bad usage, unreadable logdir or no gradscope data."
    )
    parser.add_argument(
        "logdir", metavar="LOGDIR", help="a TensorBoard logdir (one run per subdirectory)"
    )
    parser.add_argument("--run", metavar="RUN", dest="run_name", help="report only this run")
    parser.add_argument(
        "--step",
        metavar="S",
        type=int,
        help="the recorded step to show (default: each loss at its latest recorded step)",
    )
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )
    parser.add_argument("--rules", metavar="FILE", help="also evaluate the rules of this TOML file")


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Prints the report; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    from tb_gradscope import rules as rules_lib
    from tb_gradscope.read import logdir, summary

    given: list = []
    try:
        if args.rules:
            given = list(rules_lib.parse_rules_file(args.rules).rules)
        runs = logdir.load_logdir(args.logdir, args.run_name)
        reports = [summary.run_summary(logs, args.step, given) for logs in runs]
    except (rules_lib.RulesFileError, logdir.LogdirError, summary.StepError) as e:
        print(f"tb-gradscope report: {safe(e)}", file=err)
        return USAGE
    if args.format == "json":
        document = summary.json_safe({"logdir": args.logdir, "runs": reports})
        json.dump(document, out, indent=1, ensure_ascii=True, allow_nan=False)
        out.write("\n")
    else:
        out.write("\n\n".join(render_run(r) for r in reports) + "\n")
    return OK


# How the text names the framework of a FlowGraph `source` it knows by another word.
_FRAMEWORK_NAMES = {"torch": "PyTorch"}


def _framework(source: str) -> str:
    """What traced the run, in the words its users know (`torch` -> PyTorch)."""
    return _FRAMEWORK_NAMES.get(source) or safe(source or "a step")


def render_run(report: dict[str, Any]) -> str:
    """One run's report as text."""
    rec = report["recorded_steps"]
    head = f"run {safe(report['run'])}"
    if report["step"] is not None:
        head += f" at step {report['step']} ({rec['count']} recorded steps, {rec['first']}..{rec['last']})"
    else:
        head += " (no recorded steps)"
    if report["flowgraph"]:
        head += f"; FlowGraph traced from {_framework(report['flowgraph']['source'])}"
    lines = [head]
    loss_steps = report.get("loss_steps") or {}
    if any(s != report["step"] for s in loss_steps.values()):
        lines.append(
            "losses at their latest recorded step: "
            + ", ".join(f"{safe(loss)} at step {s}" for loss, s in loss_steps.items())
        )
    lines += ["", "flow (state and gradient L2 norm per loss):"]
    lines += _flow_table(report) or ["  no losses recorded"]
    lines += ["", "blocked edges:"]
    source = report["flowgraph"]["source"] if report["flowgraph"] else ""
    lines += [_blocked_line(e, source) for e in report["blocked_edges"]] or ["  none"]
    lines += ["", "drift (per pair, at the step shown or the latest before it):"]
    lines += [_drift_line(d) for d in report["drift"]] or ["  no pairs recorded"]
    lines += ["", "gradient conflict (cosine per shared scope, most opposed first):"]
    lines += [_conflict_line(c) for c in report["conflict"]] or ["  not recorded"]
    lines += ["", "anomalies:"]
    lines += [_event_line(e) for e in report["anomalies"]] or ["  none"]
    if report["skipped_steps"]:
        lines += ["", "steps skipped by the loss scaler (mixed precision):"]
        lines += [_event_line(e) for e in report["skipped_steps"]]
    lines += ["", "violations:"]
    lines += [_event_line(v) for v in report["violations"]] or [
        "  none" if report["rules"] else "  none (no rules given and none recorded)"
    ]
    if report["warnings"]:
        lines += ["", "warnings:"] + [f"  {safe(w)}" for w in report["warnings"]]
    if report["flowgraph"] and report["flowgraph"]["warnings"]:
        lines += ["", "analysis warnings:"] + [
            f"  {safe(w)}" for w in report["flowgraph"]["warnings"]
        ]
    return "\n".join(lines)


_MAX_COLUMN = 60


def _flow_table(report: dict[str, Any]) -> list[str]:
    losses, scopes = report["losses"], report["scopes"]
    if not losses:
        return []
    labels = ["  " * s.count("/") + safe(s) for s in scopes]
    cells = [[_cell(report["cells"][loss][s]) for loss in losses] for s in scopes]
    # Columns are padded to at most _MAX_COLUMN: a longer name is printed whole
    # and shifts its own row only, instead of widening every row to its length.
    first = min(_MAX_COLUMN, max([len("scope")] + [len(x) for x in labels]))
    widths = [
        min(_MAX_COLUMN, max([len(safe(loss))] + [len(row[i]) for row in cells]))
        for i, loss in enumerate(losses)
    ]
    rows = [
        "  "
        + "scope".ljust(first)
        + "".join("  " + safe(loss).ljust(w) for loss, w in zip(losses, widths))
    ]
    for label, row in zip(labels, cells):
        rows.append(
            "  " + label.ljust(first) + "".join("  " + c.ljust(w) for c, w in zip(row, widths))
        )
    return [r.rstrip() for r in rows]


def _cell(cell: dict[str, Any]) -> str:
    if cell["l2"] is None:
        return cell["state"]
    return f"{cell['state']} {number(cell['l2'])}"


def _blocked_line(edge: dict[str, Any], source: str) -> str:
    """The edge and what to do about it, in the words the tab shows (`read.evidence`)."""
    return f"  {blocked_line(edge)}\n    fix: {blocked_fix(edge, source)}"


def _drift_line(drift: dict[str, Any]) -> str:
    declared = ""
    if drift.get("declared_tau") is not None:
        declared += f" declared tau {number(drift['declared_tau'])}"
    if drift.get("declared_every") is not None:
        declared += f" declared every {number(drift['declared_every'])}"
    return (
        f"  {safe(drift['pair'])} ({safe(drift['target'])} <- {safe(drift['online'])}) at step {drift['step']}: "
        f"drift {number(drift.get('drift'))}, target step {number(drift.get('target_step'))}, "
        f"tau {number(drift.get('tau'))}{declared}"
    )


def _conflict_line(conflict: dict[str, Any], shown: int = 4) -> str:
    values = sorted(((c, s) for s, c in conflict["cosine"].items() if c is not None))
    if not values:
        return f"  {safe(conflict['pair'])} at step {conflict['step']}: no finite cosine"
    parts = ", ".join(f"{safe(s)} {number(c)}" for c, s in values[:shown])
    more = f" (+{len(values) - shown} more)" if len(values) > shown else ""
    return f"  {safe(conflict['pair'])} at step {conflict['step']}: {parts}{more}"


def _event_line(event: dict[str, Any]) -> str:
    if "when" in event:  # a violation: one line per broken rule, as check prints it
        line = f"  {safe(event['name'])}  {event['when']}  {safe(event['message'])}"
    else:
        when = " (trace)" if (event.get("evidence") or {}).get("at") == "trace" else ""
        line = f"  step {event['step']}{when}  {safe(event['name'])}  {safe(event['message'])}"
    shown = evidence(event.get("evidence") or {})
    if shown:
        line += f"  [{shown}]"
    if "when" not in event and event.get("steps_seen", 1) > 1:
        line += f"  ({event['steps_seen']} steps, last {event['last_step']})"
    notes = ["recorded"] if event.get("source") == "recorded" else []
    if event.get("also_breaks"):
        notes.append("also breaks " + ", ".join(safe(n) for n in event["also_breaks"]))
    if notes:
        line += f"  ({'; '.join(notes)})"
    return line
