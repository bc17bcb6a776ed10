"""The README's quickstarts run as written, record what the README says and
say where the logs went; the README stays a start.

Each block after a `<!-- quickstart: NAME -->` marker is executed in its own
Python process in a fresh directory; the logs it leaves are read back through
TensorBoard's ingestion. The PyTorch quickstart runs with tensorflow blocked
(`[torch]` installs none), and so does `tb-gradscope report` on its logs. The README's TF1 example is docs/TF1.md's first block,
run by tests/e2e/docs/test_tf1_docs.py.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.runs import RunLogs
from tests.support.no_tensorflow import NO_TENSORFLOW, NONE_LOADED

REPO = pathlib.Path(__file__).resolve().parents[3]
README = REPO / "README.md"
BLOCK = re.compile(r"<!-- quickstart: (\w+) -->\n```python\n(.*?)\n```", re.S)
# issue 36: "<= ~150 lines", a reader's two minutes; issue 58 adds the PyTorch quickstart.
MAX_LINES = 175
MAX_TORCH_LINES = 15  # issue 58: the PyTorch quickstart in at most 15 lines
LOGDIRS = {
    "custom_loop": "logs/dqn",
    "torch_loop": "logs/torch_dqn",
    "keras_fit": "logs/keras",
}  # where each quickstart says it wrote


def _quickstarts() -> dict[str, str]:
    return dict(BLOCK.findall(README.read_text(encoding="utf-8")))


def _run(name: str, tmp_path: pathlib.Path, prelude: str = "", epilogue: str = "") -> list[RunLogs]:
    """Runs a quickstart between `prelude` and `epilogue`; it must end by saying
    where its logs are and how to look."""
    script = tmp_path / f"{name}.py"
    script.write_text(prelude + _quickstarts()[name] + "\n" + epilogue, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert LOGDIRS[name] in last and ".venv/bin/tb-gradscope report logs" in last, result.stdout
    return load_logdir(str(tmp_path / "logs"))


def _final_flowgraph(run: RunLogs) -> fmt.FlowGraph:
    assert run.flowgraphs, f"run {run.run} has no FlowGraph"
    return run.flowgraphs[-1][1]


def test_readme_has_the_three_quickstarts():
    assert set(_quickstarts()) == set(LOGDIRS)


def test_readme_is_a_start_not_a_reference():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_LINES, f"README.md has {len(lines)} lines; move detail to docs/"


def test_readme_commands_run_without_the_venv_on_path():
    text = README.read_text(encoding="utf-8")
    shell = "\n".join(re.findall(r"```sh\n(.*?)\n```", text, re.S))
    commands = [line.split("#")[0].strip() for line in shell.splitlines()]
    tools = [c for c in commands if c.split(" ")[0].endswith(("tensorboard", "tb-gradscope"))]
    assert tools and all(c.startswith(".venv/bin/") for c in tools), tools


def test_readme_links_point_at_files_that_exist():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text(encoding="utf-8"))
    missing = [link for link in links if not (REPO / link).exists()]
    assert links and not missing, missing


@pytest.mark.slow
def test_custom_loop_quickstart_blocks_the_target_and_tracks_the_copy(tmp_path):
    (run,) = _run("custom_loop", tmp_path)
    assert run.run == "dqn"
    graph = _final_flowgraph(run)
    assert graph.state("td", "online") == fmt.UPDATES
    assert graph.state("td", "target") == fmt.BLOCKED
    assert any(e.op_type == "StopGradient" for e in graph.blocked_edges)
    assert run.steps[:3] == [0, 10, 20] and len(run.steps) == 20
    assert run.drift, "the declared pair records DRIFT"
    assert not [e for e in run.events if e.type == fmt.VIOLATION]


@pytest.mark.slow
def test_keras_quickstart_attributes_each_output_loss(tmp_path):
    (run,) = _run("keras_fit", tmp_path)
    last = run.grads[run.steps[-1]]
    assert set(last) == {"q", "aux"}
    q = last["q"]
    assert q.row("agent/q")["grad_vars"] > 0
    assert q.row("agent/aux")["grad_vars"] == 0
    assert not [e for e in run.events if e.type == fmt.VIOLATION]


def test_torch_quickstart_is_at_most_15_lines():
    assert len(_quickstarts()["torch_loop"].splitlines()) <= MAX_TORCH_LINES


@pytest.mark.slow
def test_torch_quickstart_runs_and_reports_without_tensorflow(tmp_path):
    (run,) = _run("torch_loop", tmp_path, prelude=NO_TENSORFLOW, epilogue=NONE_LOADED)
    assert run.run == "torch_dqn"
    graph = _final_flowgraph(run)
    assert graph.source == "torch"
    assert graph.state("td", "online") == fmt.UPDATES
    assert graph.state("td", "target") == fmt.BLOCKED
    (edge,) = {(e.producer_scope.split("/")[0], e.source.line) for e in graph.blocked_edges}
    assert edge[0] == "target"
    assert (
        ".detach()"
        in _quickstarts()["torch_loop"].splitlines()[edge[1] - 1 - len(NO_TENSORFLOW.splitlines())]
    )
    assert run.steps[:3] == [0, 10, 20] and len(run.steps) == 20
    assert run.drift, "the declared pair records DRIFT"
    assert not [e for e in run.events if e.type == fmt.VIOLATION]
    code = (
        NO_TENSORFLOW
        + "from tb_gradscope.cli import main\n"
        + "status = main(['report', 'logs', '--run', 'torch_dqn'])\n"
        + NONE_LOADED
        + "sys.exit(status)\n"
    )
    report = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert report.returncode == 0, report.stderr[-3000:]
    assert "FlowGraph traced from PyTorch" in report.stdout.splitlines()[0]
    rows = {
        line.split()[0]: line.split()
        for line in report.stdout.splitlines()
        if line.startswith("  ")
    }
    assert "updates" in rows["online"] and "blocked" in rows["target"], report.stdout
