"""CHANGELOG.md reads as a changelog: a section per version, newest first, each a
screen at most, in Added / Changed / Fixed (issue 60); the history of how each
change was made stays in git."""

from __future__ import annotations

import pathlib
import re

CHANGELOG = pathlib.Path(__file__).resolve().parents[3] / "CHANGELOG.md"
MAX_SECTION_LINES = 80
KINDS = ("Added", "Changed", "Fixed")


def _sections() -> dict[str, list[str]]:
    """`## ` heading -> the lines up to the next one (heading included)."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in CHANGELOG.read_text(encoding="utf-8").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        if current is not None:
            sections[current].append(line)
    return sections


def test_unreleased_comes_first_then_versions_newest_first():
    names = list(_sections())
    assert names[0] == "Unreleased", names
    versions = [tuple(int(n) for n in name.split(".")) for name in names[1:]]
    assert versions and all(re.fullmatch(r"\d+\.\d+\.\d+", n) for n in names[1:]), names
    assert versions == sorted(versions, reverse=True), names


def test_every_section_is_a_screen_at_most():
    long = {
        name: len(lines) for name, lines in _sections().items() if len(lines) > MAX_SECTION_LINES
    }
    assert not long, f"CHANGELOG.md sections over {MAX_SECTION_LINES} lines: {long}"


def test_every_section_says_what_was_added_changed_or_fixed():
    for name, lines in _sections().items():
        kinds = [line[4:].strip() for line in lines if line.startswith("### ")]
        assert kinds and set(kinds) <= set(KINDS), (name, kinds)
        assert kinds == [k for k in KINDS if k in kinds], (name, kinds)
