"""The README's quickstarts run as written and record what the README says.

Each block after a `<!-- quickstart: NAME -->` marker is executed in its own
Python process in a fresh directory; the logs it leaves are read back through
TensorBoard's ingestion.
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

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"<!-- quickstart: (\w+) -->\n```python\n(.*?)\n```", re.S)


def _quickstarts() -> dict[str, str]:
    return dict(BLOCK.findall(README.read_text(encoding="utf-8")))


def _run(name: str, tmp_path: pathlib.Path) -> list[RunLogs]:
    script = tmp_path / f"{name}.py"
    script.write_text(_quickstarts()[name], encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return load_logdir(str(tmp_path / "logs"))


def _final_flowgraph(run: RunLogs) -> fmt.FlowGraph:
    assert run.flowgraphs, f"run {run.run} has no FlowGraph"
    return run.flowgraphs[-1][1]


def test_readme_has_the_three_quickstarts():
    assert set(_quickstarts()) == {"custom_loop", "keras_fit", "tf1_session"}


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


@pytest.mark.slow
def test_tf1_quickstart_gives_seed_01s_matrix(tmp_path):
    (run,) = _run("tf1_session", tmp_path)
    graph = _final_flowgraph(run)
    assert [graph.state("loss1", s) for s in ("Agent/layer1", "Agent/layer2_1", "Agent/layer2_2")] == [
        fmt.UPDATES, fmt.UPDATES, fmt.INDEPENDENT,
    ]
    assert [graph.state("loss2", s) for s in ("Agent/layer1", "Agent/layer2_1", "Agent/layer2_2")] == [
        fmt.UPDATES, fmt.INDEPENDENT, fmt.UPDATES,
    ]
    assert len(run.steps) == 5
