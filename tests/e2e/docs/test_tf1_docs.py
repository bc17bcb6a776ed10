"""docs/TF1.md runs as written and shows what it says.

Every fenced block of the guide carries a `<!-- tf1-doc: NAME -->` marker;
the Python blocks run in this process, in order, in one fresh directory (each
builds its own `tf.Graph`), the shell block in a shell; the logs they leave
are read back through TensorBoard's data provider.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

from tb_gradscope import format as fmt
from tests.support.tf1_support import read_records

GUIDE = pathlib.Path(__file__).resolve().parents[3] / "docs" / "TF1.md"
BLOCK = re.compile(r"<!-- tf1-doc: (\w+) -->\n```(python|sh)\n(.*?)\n```", re.S)


def _blocks() -> dict[str, tuple[str, str]]:
    return {
        name: (lang, code) for name, lang, code in BLOCK.findall(GUIDE.read_text(encoding="utf-8"))
    }


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    """Runs every block once, in the guide's order; returns the directory."""
    where = tmp_path_factory.mktemp("tf1_doc")
    old = os.getcwd()
    os.chdir(where)
    results = {}
    try:
        for name, (lang, code) in _blocks().items():
            if lang == "python":
                exec(compile(code, f"docs/TF1.md[{name}]", "exec"), {"__name__": "__main__"})
            else:
                env = dict(
                    os.environ,
                    PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
                )
                results[name] = subprocess.run(
                    ["bash", "-c", code], capture_output=True, text=True, env=env, timeout=300
                )
    finally:
        os.chdir(old)
    return where, results


def test_every_code_block_of_the_guide_is_run():
    fences = re.findall(r"^```(\w*)$", GUIDE.read_text(encoding="utf-8"), re.M)
    opened = [f for f in fences if f]  # every other fence closes a block
    assert len(opened) == len(_blocks()) == 4, opened
    assert [lang for lang, _ in _blocks().values()] == ["python", "python", "sh", "python"]


def _flow(logdir) -> fmt.FlowGraph:
    [flow] = read_records(str(logdir))[("flowgraph", "")]
    return fmt.FlowGraph.from_json(flow.value[0])


@pytest.mark.slow
def test_multihead_var_list_leaves_the_shared_layer_ignored_for_loss2(ran):
    where, _ = ran
    records = read_records(str(where / "logs" / "multihead"))
    assert [r.step for r in records[("grad_stats", "loss2")]] == [0, 10, 20]
    graph = _flow(where / "logs" / "multihead")
    assert graph.state("loss2", "Agent/layer1") == fmt.IGNORED
    assert graph.state("loss2", "Agent/layer2_2") == fmt.UPDATES
    assert graph.state("loss1", "Agent/layer2_2") == fmt.INDEPENDENT
    assert not [k for k in records if k[0] == "events"]


@pytest.mark.slow
def test_ddpg_targets_are_paired_ignored_and_drift_with_their_tau(ran):
    where, _ = ran
    logdir = where / "logs" / "ddpg"
    graph = _flow(logdir)
    assert graph.state("critic", "Critic/target") == fmt.IGNORED
    assert graph.state("critic", "Actor/target") == fmt.IGNORED
    assert graph.state("critic", "Actor/eval") == fmt.INDEPENDENT
    assert graph.state("actor", "Actor/eval") == fmt.UPDATES
    assert graph.state("actor", "Critic/eval") == fmt.INDEPENDENT
    records = read_records(str(logdir))
    for name in ("Actor/target<-Actor/eval", "Critic/target<-Critic/eval"):
        series = records[("drift", name)]
        assert [r.step for r in series] == [0, 5, 10, 15]
        root = name.split("<-")[0]
        assert all(r.value.row(root)["tau"] == pytest.approx(0.01, rel=1e-3) for r in series[1:])
    assert not [k for k in records if k[0] == "events"]


@pytest.mark.slow
def test_check_evaluates_the_ddpg_runs_recorded_rules_and_passes(ran):
    from tb_gradscope.read.logdir import load_logdir

    where, results = ran
    (run,) = load_logdir(str(where / "logs" / "ddpg"))
    assert run.recorded_rules == [
        "never(critic, Actor/*)",
        "only(actor, [Actor/eval])",
        "never(*, */target/*)",
    ]
    done = results["check"]
    assert done.returncode == 0, done.stdout + done.stderr
    assert "checked 1 run(s): no violations" in done.stderr


@pytest.mark.slow
def test_monitored_training_session_records_every_second_step(ran):
    where, _ = ran
    records = read_records(str(where / "logs" / "monitored"))
    assert [r.step for r in records[("grad_stats", "fit")]] == [0, 2, 4]
    assert [r.step for r in records[("update_stats", "")]] == [0, 2, 4]
