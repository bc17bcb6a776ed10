"""The built wheel carries the tab: TensorBoard serves index.js from it.

Builds the wheel, installs it with --no-deps into a fresh plain venv, and makes
tensorboard (and its dependencies) importable through a .pth file that lists
the dev venv's site-packages after the new venv's own. Directories named in a
.pth file do not get their own .pth files run, so the dev venv's editable
tb_gradscope finder never loads and cannot shadow the wheel; the test checks it.
"""

from __future__ import annotations

import hashlib
import pathlib
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from tests.support.frontend_fixtures import REPO, start_tensorboard, stop_tensorboard

pytestmark = pytest.mark.slow

BUNDLE = "tb_gradscope/plugin/static/index.js"


def _run(*command: str | pathlib.Path, cwd: pathlib.Path | None = None) -> str:
    result = subprocess.run(
        [str(c) for c in command], capture_output=True, text=True, timeout=300, cwd=cwd
    )
    assert result.returncode == 0, f"{command} failed:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def test_installed_wheel_serves_the_tab(tmp_path: pathlib.Path) -> None:
    wheels = tmp_path / "wheels"
    # --no-build-isolation builds with the dev venv's setuptools, offline.
    _run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "--no-build-isolation",
        "-q",
        "-w",
        wheels,
        REPO,
    )
    (wheel,) = wheels.glob("tb_gradscope-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        packaged = archive.read(BUNDLE)
    assert packaged == (REPO / BUNDLE).read_bytes()

    venv = tmp_path / "venv"
    _run(sys._base_executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    _run(
        sys.executable,
        "-m",
        "pip",
        "--python",
        python,
        "install",
        "-q",
        "--no-deps",
        "--no-index",
        wheel,
    )
    site = pathlib.Path(
        _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").strip()
    )
    # A .pth line is appended to sys.path after the venv's own site-packages.
    (site / "dev_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # Run from tmp_path: from the repository, `python -c` would import the source tree.
    where = _run(python, "-c", "import tb_gradscope; print(tb_gradscope.__file__)", cwd=tmp_path)
    installed = pathlib.Path(where.strip())
    assert installed.is_relative_to(venv), f"tb_gradscope imported from {installed}, not the wheel"

    # Mark the installed copy: only a server reading the wheel's files sends it.
    marker = (
        f"\n// installed-wheel {hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]}\n".encode()
    )
    installed_bundle = installed.parent / "plugin" / "static" / "index.js"
    installed_bundle.write_bytes(installed_bundle.read_bytes() + marker)

    logdir = tmp_path / "logs"
    logdir.mkdir()
    tb = start_tensorboard(logdir, tmp_path / "tb-stderr.txt", executable=python, module=True)
    try:
        served = tb.get("/data/plugin/gradscope/index.js")
        entry = tb.get("/data/plugin_entry.html?name=gradscope").decode()
    finally:
        stop_tensorboard(tb.process)
    assert served == packaged + marker
    assert "index.js" in entry and "render()" in entry
