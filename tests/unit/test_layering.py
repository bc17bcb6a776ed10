"""The readers' side never pulls in tensorflow (TensorBoard must start fast), and
imports run one way: no cycle between packages; format <- read <- plugin, commands."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import tb_gradscope

PACKAGE_DIR = Path(tb_gradscope.__file__).parent

# Every module of the read package, so a new one is guarded the day it lands.
READ_PACKAGE = sorted(
    "tb_gradscope.read." + path.stem
    for path in (PACKAGE_DIR / "read").glob("*.py")
    if path.stem != "__init__"
)

# Every module of the framework-neutral core, shared by the TF and PyTorch recorders.
CORE_PACKAGE = sorted(
    "tb_gradscope.core." + path.stem
    for path in (PACKAGE_DIR / "core").glob("*.py")
    if path.stem != "__init__"
)

READ_SIDE = [
    "tb_gradscope",
    "tb_gradscope.format",
    "tb_gradscope.core",
    *CORE_PACKAGE,
    "tb_gradscope.scopes",
    "tb_gradscope.rules",
    "tb_gradscope.read",
    *READ_PACKAGE,
    "tb_gradscope.plugin.plugin",
    "tb_gradscope.plugin.loader",
    "tb_gradscope.commands.report",
    "tb_gradscope.commands.check",
    "tb_gradscope.commands.doctor",
]


def test_the_read_package_lists_what_turns_logs_into_conclusions():
    for module in (
        "flowstate",
        "anomalies",
        "drift",
        "tracks",
        "violations",
        "findings",
        "runs",
        "reader",
        "logdir",
    ):
        assert f"tb_gradscope.read.{module}" in READ_PACKAGE


def test_read_side_does_not_import_tensorflow():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in READ_SIDE)
        + "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras', 'torch'))\n"
        + "print(','.join(bad))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"imported: {result.stdout.strip()}"


def test_the_core_holds_what_both_recorders_share():
    for module in ("writer", "rules", "pairs", "tables", "drift", "cells", "source", "warn"):
        assert f"tb_gradscope.core.{module}" in CORE_PACKAGE


def test_the_torch_recorder_never_imports_tensorflow():
    code = (
        "import sys\n"
        "import tb_gradscope.torch\n"
        "from tb_gradscope.torch import Recorder, pair_models\n"
        "import tb_gradscope.torch._recording\n"
        "print(','.join(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "", f"imported: {result.stdout.strip()}"


def test_the_core_and_the_torch_recorder_import_no_tf_side_package():
    edges = _package_imports()
    assert edges["core"] <= {"format", "scopes", "rules"}, edges["core"]
    assert edges["torch"] <= {"core", "format", "scopes", "rules"}, edges["torch"]
    assert "core" in edges["record"] and "core" in edges["integrations"]


def _top_level(module: str) -> str | None:
    """`tb_gradscope.record._stats` -> `record`; None outside the package or for its root."""
    parts = module.split(".")
    return parts[1] if parts[0] == "tb_gradscope" and len(parts) > 1 else None


def _imported_modules(path: Path) -> set[str]:
    """Every tb_gradscope module a file imports, at the top or inside a function,
    plus the modules named in lazy-import tables (`_LAZY = {"Name": "tb_gradscope.x"}`)."""
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif (
            isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and node.value.startswith("tb_gradscope.")
        ):
            found.add(node.value)
    return found


def _package_imports() -> dict[str, set[str]]:
    """Top-level package -> the other top-level packages it imports."""
    edges: dict[str, set[str]] = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        source = _top_level(
            "tb_gradscope." + ".".join(path.relative_to(PACKAGE_DIR).with_suffix("").parts)
        )
        if source is None or source == "__init__":
            continue
        for module in _imported_modules(path):
            target = _top_level(module)
            if (
                target
                and target != source
                and ((PACKAGE_DIR / target).is_dir() or (PACKAGE_DIR / f"{target}.py").exists())
            ):
                edges.setdefault(source, set()).add(target)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each cycle of the import graph once, as the packages along it."""
    cycles: list[list[str]] = []
    seen: set[frozenset[str]] = set()

    def walk(path: list[str]) -> None:
        for nxt in sorted(edges.get(path[-1], ())):
            if nxt == path[0]:
                if frozenset(path) not in seen:
                    seen.add(frozenset(path))
                    cycles.append(path + [nxt])
            elif nxt not in path and nxt > path[0]:
                walk(path + [nxt])

    for start in sorted(edges):
        walk([start])
    return cycles


def test_the_import_graph_finds_a_planted_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]


def test_the_import_graph_sees_lazy_and_function_level_imports():
    edges = _package_imports()
    assert "pairs" in edges["record"]  # record/targets.py resolves pairs
    assert "record" in edges["integrations"]


def test_no_import_cycle_between_top_level_packages():
    cycles = _cycles(_package_imports())
    assert cycles == [], "import cycles between top-level packages: " + "; ".join(
        " -> ".join(c) for c in cycles
    )


def test_arrows_run_format_then_read_then_plugin_and_commands():
    edges = _package_imports()
    assert "format" not in edges, f"format imports {sorted(edges.get('format', ()))}"
    assert not {"plugin", "commands", "cli"} & edges["read"], (
        f"read imports {sorted(edges['read'])}"
    )
    assert "read" in edges["plugin"] and "read" in edges["commands"]
    importers = sorted(source for source, targets in edges.items() if "read" in targets)
    assert importers == ["commands", "plugin"], f"read is imported by {importers}"
    assert "plugin" not in edges["commands"] and "commands" not in edges["plugin"]
