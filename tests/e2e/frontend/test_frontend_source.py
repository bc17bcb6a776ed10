"""Checks on the frontend's sources and committed bundle that need no browser.

The tab shows names from log files, which are untrusted: no source may hand
text to an HTML parser. The bundle must be the one self-contained ES module the
backend whitelists, built reproducibly from exactly pinned packages.
"""

from __future__ import annotations

import json
import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[3]

SOURCES = REPO / "frontend" / "src"
STATIC = REPO / "tb_gradscope" / "plugin" / "static"
HTML_SINKS = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|DOMParser|createContextualFragment"
    r"|\beval\s*\(|new\s+Function\s*\(|srcdoc"
)


def test_sources_never_hand_text_to_an_html_parser() -> None:
    files = sorted(SOURCES.rglob("*.ts"))
    assert len(files) >= 5
    hits = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if HTML_SINKS.search(line)
    ]
    assert hits == []


def test_bundle_is_one_es_module_exporting_render() -> None:
    assert sorted(p.name for p in STATIC.iterdir()) == ["index.js"]
    bundle = (STATIC / "index.js").read_text(encoding="utf-8")
    assert re.search(r"export\s*\{\s*[\w$]+ as render\s*\}", bundle)  # a minified name may hold a $
    # Nothing that varies between machines or builds.
    assert "sourceMappingURL" not in bundle
    assert str(REPO) not in bundle
    assert not re.search(r"(https?:)?//(cdn|unpkg|cdnjs)\.", bundle)


def test_frontend_packages_are_pinned_exactly() -> None:
    package = json.loads((REPO / "frontend" / "package.json").read_text())
    lock = json.loads((REPO / "frontend" / "package-lock.json").read_text())
    wanted = {**package.get("dependencies", {}), **package.get("devDependencies", {})}
    assert wanted
    for name, version in wanted.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name} is not pinned exactly: {version}"
        assert lock["packages"][f"node_modules/{name}"]["version"] == version, name
