"""docs/PERFORMANCE.md quotes only lines the benches print, and stays one page.

The names a bench can print are read off its source, not off a run (a full
run takes minutes): every `report(name, ...)` / `harness.report(name, ...)` and
every `print(f"name: ...")` in bench/bench_*.py, an f-string's `{...}` parts
standing for any name fragment. A name the doc quotes (in backticks, snake_case)
must match one of them, unless it names a bench script or is one of the few
identifiers the doc names that are not bench lines (`NOT_LINES`); a row of the "Reproducing a figure"
table must name a line of its own bench.
"""

from __future__ import annotations

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[3]
DOC = ROOT / "docs" / "PERFORMANCE.md"
MAX_LINES = 250  # issue 60

# Identifiers docs/PERFORMANCE.md names that are not bench output lines.
NOT_LINES = {
    "median_ratio",  # bench/harness.py
    "plain_again",  # the A/A control's candidate label
    "grad_stats",  # recorder parts (`tb_gradscope/<part>/`)
    "update_stats",
    "summarize_grads_and_vars",  # TF-Agents
    "train_step",  # Keras
    "add_histogram",  # torch.utils.tensorboard
}

QUOTED = re.compile(r"`([a-z][a-z0-9]*(?:_[a-z0-9]+)+)`")
# A template's literal text must be this long to count: `{prefix}_{name}`
# (bench_plugin) or `{label}_ratio` (bench_scaling) would match nearly anything.
MIN_LITERAL = 8


def _name_templates(path: pathlib.Path) -> list[tuple[str, int]]:
    """(regex, literal characters) of every line name the bench can print."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        first = node.args[0]
        parts: list[str | None] = []  # literal text, None for a `{...}`
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            parts = [first.value]
        elif isinstance(first, ast.JoinedStr):
            parts = [v.value if isinstance(v, ast.Constant) else None for v in first.values]
        if not parts:
            continue
        if called == "print":  # `print(f"name: {value}")`: the name is before ": "
            text = "".join(p if p is not None else "\0" for p in parts)
            if ": " not in text:
                continue
            parts = [p if p != "\0" else None for p in re.split("(\0)", text.split(": ")[0]) if p]
        elif called != "report":
            continue
        regex = "".join(re.escape(p) if p is not None else "[a-z0-9_]+" for p in parts)
        found.append((regex, sum(len(p) for p in parts if p is not None)))
    return found


def _templates() -> dict[str, list[str]]:
    """bench name -> the regexes of its line names (weak templates left out)."""
    return {
        path.stem: [r for r, literal in _name_templates(path) if literal >= MIN_LITERAL]
        for path in sorted((ROOT / "bench").glob("bench_*.py"))
    }


def _printed_by(name: str, regexes: list[str]) -> bool:
    return any(re.fullmatch(r, name) for r in regexes)


def test_the_templates_read_literal_templated_and_printed_names():
    templates = _templates()
    overhead = templates["bench_overhead"]
    assert _printed_by("overhead_vs_hand_logger", overhead)
    assert _printed_by("user_readme16_rec_function_vs_hand_scalar_host", overhead)
    assert not _printed_by("overhead_vs_hand_loger", overhead)
    assert _printed_by("analysis_to_trace_ratio_10k", templates["bench_analysis"])
    assert _printed_by("tf1_hook_run_ratio_default_vs_without", templates["bench_tf1"])


def test_every_line_the_doc_quotes_is_printed_by_a_bench():
    templates = _templates()
    every = [r for regexes in templates.values() for r in regexes]
    quoted = set(QUOTED.findall(DOC.read_text(encoding="utf-8"))) - NOT_LINES - set(templates)
    assert len(quoted) >= 20, sorted(quoted)  # the page quotes its headlines
    missing = sorted(name for name in quoted if not _printed_by(name, every))
    assert not missing, f"docs/PERFORMANCE.md quotes lines no bench prints: {missing}"


def test_the_identifiers_that_are_not_lines_are_not_bench_lines():
    every = [r for regexes in _templates().values() for r in regexes]
    assert not [name for name in NOT_LINES if _printed_by(name, every)]


def test_each_reproduce_row_names_a_line_of_its_own_bench():
    templates = _templates()
    text = DOC.read_text(encoding="utf-8")
    rows = re.findall(r"^\| (`bench_[^|]*)\|[^|]*\| (.+) \|$", text, re.M)
    benches_named = {b for cell, _ in rows for b in re.findall(r"`(bench_\w+)`", cell)}
    assert benches_named >= {"bench_overhead", "bench_calls", "bench_parts", "bench_ops"}
    for cell, lines in rows:
        benches = re.findall(r"`(bench_\w+)`", cell)
        assert set(benches) <= set(templates), f"{benches}: not all bench/ scripts"
        names = QUOTED.findall(lines)
        assert names, f"the row of {benches} names no line"
        regexes = [r for b in benches for r in templates[b]]
        assert all(_printed_by(n, regexes) for n in names), (benches, names)


def test_the_page_is_one_page():
    lines = DOC.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"docs/PERFORMANCE.md has {len(lines)} lines"
