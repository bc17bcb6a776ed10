"""`pip install` resolves what setup.py promises: the read side without a framework,
`[torch]` with torch and without tensorflow, `[tensorflow]` with tensorflow and without torch.

Each test asks pip to resolve this checkout from the package index
(`pip install --dry-run --ignore-installed --report`), as a fresh venv would,
without installing anything.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.slow


def resolved(tmp_path: pathlib.Path, requirement: str) -> set[str]:
    """The distribution names pip would install for `requirement` in an empty venv."""
    report = tmp_path / "report.json"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--dry-run",
            "--ignore-installed",
            "--quiet",
            "--report",
            str(report),
            requirement,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    names = {item["metadata"]["name"] for item in json.loads(report.read_text())["install"]}
    return {name.lower().replace("_", "-") for name in names}


def test_the_torch_extra_installs_torch_and_not_tensorflow(tmp_path):
    names = resolved(tmp_path, ".[torch]")
    assert {"tb-gradscope", "torch", "tensorboard", "numpy"} <= names
    assert not {n for n in names if n.startswith(("tensorflow", "keras", "tf-keras"))}, names


def test_the_plain_install_brings_neither_framework(tmp_path):
    names = resolved(tmp_path, ".")
    assert {"tb-gradscope", "tensorboard", "numpy"} <= names
    assert not {n for n in names if n.startswith(("tensorflow", "keras", "torch", "triton"))}, names


def test_the_tensorflow_extra_installs_tensorflow_and_not_torch(tmp_path):
    names = resolved(tmp_path, ".[tensorflow]")
    assert {"tb-gradscope", "tensorflow", "tensorboard"} <= names
    assert not {n for n in names if n.startswith(("torch", "triton"))}, names
