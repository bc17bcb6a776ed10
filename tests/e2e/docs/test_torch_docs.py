"""docs/TORCH.md: every Python block runs as written, without tensorflow, and
records what the text around it says.

Each block after a `<!-- torch: NAME -->` marker is a complete script. It runs
in its own process, in a fresh directory, with tensorflow blocked (as after
`pip install 'tb-gradscope[torch]'`); the logs it leaves are read back through
TensorBoard's ingestion and held to the flow states the guide explains.
"""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from tb_gradscope import format as fmt
from tb_gradscope.format import flowgraph as fg
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.runs import RunLogs
from tests.support.no_tensorflow import NO_TENSORFLOW, NONE_LOADED

REPO = pathlib.Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "TORCH.md"
BLOCK = re.compile(r"<!-- torch: (\w+) -->\n```python\n(.*?)\n```", re.S)
UPD, IGN, BLK, IND = fmt.UPDATES, fmt.IGNORED, fmt.BLOCKED, fmt.INDEPENDENT

# Block name -> (run it writes, {(loss, scope): state} at its last FlowGraph).
TRUTHS = {
    "dqn": ("dqn", {("td", "online"): UPD, ("td", "target"): BLK}),
    "ddpg": (
        "ddpg",
        {
            ("critic", "critic"): UPD,
            ("critic", "actor"): IND,
            ("critic", "actor_target"): BLK,
            ("critic", "critic_target"): BLK,
            ("actor", "actor"): UPD,
            ("actor", "critic"): IGN,
            ("actor", "actor_target"): IND,
            ("actor", "critic_target"): IND,
        },
    ),
    "start_point": ("dqn3", {("td", "online"): UPD, ("td", "target"): IND}),
    "autograd_grad": (
        "pcgrad",
        {
            ("task1", "net/trunk"): UPD,
            ("task1", "net/head1"): UPD,
            ("task1", "net/head2"): IND,
            ("task2", "net/trunk"): UPD,
            ("task2", "net/head2"): UPD,
            ("task2", "net/head1"): IND,
        },
    ),
    "ema": (
        "mean_teacher",
        {
            ("supervised", "student"): UPD,
            ("consistency", "student"): UPD,
            ("supervised", "teacher"): IND,
            ("consistency", "teacher"): BLK,
        },
    ),
    "frozen": ("finetune", {("ce", "head"): UPD, ("ce", "encoder"): BLK}),
    "ddp": ("ddp", {("mse", "net/0"): UPD, ("mse", "net/2"): UPD}),
    "lightning_gan": (
        "gan/version_0",
        {
            ("g_loss", "generator"): UPD,
            ("g_loss", "discriminator"): BLK,
            ("d_loss", "discriminator"): UPD,
            ("d_loss", "generator"): BLK,
        },
    ),
    "lightning_heads": (
        "two_heads",
        {
            ("price", "backbone"): UPD,
            ("price", "price_head"): UPD,
            ("price", "category_head"): IND,
            ("category", "backbone"): UPD,
            ("category", "category_head"): UPD,
            ("category", "price_head"): IND,
        },
    ),
    "gpu": ("dqn_gpu", {("td", "online"): UPD, ("td", "target"): BLK}),
    "amp": ("amp", {("ce", "net"): UPD}),
    "compile": ("dqn_compiled", {("td", "online"): UPD, ("td", "target"): BLK}),
    "watch": (
        "td3",
        {
            ("critic", "critic"): UPD,
            ("critic", "actor"): IND,
            ("critic", "actor_target"): BLK,
            ("critic", "critic_target"): BLK,
            ("actor", "actor"): UPD,
            ("actor", "critic"): IGN,  # the optimizers were found: the critic's stepped before
            ("actor", "actor_target"): IND,
            ("actor", "critic_target"): IND,
        },
    ),
    "sb3": (
        "sac",
        {
            ("critic_loss", "critic"): UPD,
            ("critic_loss", "critic_target"): BLK,
            ("critic_loss", "actor"): BLK,
            ("critic_loss", "ent_coef"): BLK,
            ("actor_loss", "actor"): UPD,
            ("actor_loss", "critic"): IGN,
            ("actor_loss", "ent_coef"): BLK,
            ("ent_coef_loss", "ent_coef"): UPD,
            ("ent_coef_loss", "actor"): BLK,
        },
    ),
}


def _blocks() -> dict[str, str]:
    return dict(BLOCK.findall(DOC.read_text(encoding="utf-8")))


def _run(name: str, tmp_path: pathlib.Path) -> RunLogs:
    """Runs block `name` with tensorflow blocked; returns the run it says it wrote."""
    run = TRUTHS[name][0]
    script = tmp_path / f"{name}.py"
    script.write_text(
        NO_TENSORFLOW + _blocks()[name] + NONE_LOADED,
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    last = result.stdout.strip().splitlines()[-1]
    assert f"logs/{run}" in last and f"tb-gradscope report logs --run {run}" in last, last
    assert "GradscopeWarning" not in result.stderr, result.stderr[-3000:]
    (logs,) = load_logdir(str(tmp_path / "logs"))
    assert logs.run == run
    return logs


def test_every_block_of_the_guide_is_run_here():
    assert set(_blocks()) == set(TRUTHS)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(TRUTHS))
def test_each_block_records_the_flow_states_the_guide_explains(name, tmp_path):
    logs = _run(name, tmp_path)
    graph = logs.flowgraphs[-1][1]
    assert graph.source == "torch"
    seen = {cell: graph.state(*cell) for cell in TRUTHS[name][1]}
    assert seen == TRUTHS[name][1]
    assert not [e for e in logs.events if e.type == fmt.VIOLATION], logs.events
    losses = {loss for loss, _ in TRUTHS[name][1]}
    skipped = {e.step for e in logs.events if e.type == fmt.SKIPPED}  # a GradScaler's
    for step in logs.steps:  # every loss at every recorded step the scaler did not skip
        if step not in skipped:
            assert set(logs.grads[step]) == losses, (step, sorted(logs.grads[step]))
    if name == "dqn":
        assert logs.steps[:3] == [0, 10, 20] and logs.drift
    if name == "ddpg":
        assert sorted(logs.drift) == ["actor_target<-actor", "critic_target<-critic"]
    if name == "start_point":
        assert [(info.name, info.kind) for info in graph.losses] == [("td", "start_point")]
    if name == "ema":
        assert logs.drift, "pairs='auto' recognised the AveragedModel"
    if name == "ddp":  # two ranks trained; rank 0 alone wrote, under scopes without module.
        assert len(list((tmp_path / "logs" / "ddp").iterdir())) == 1
        assert list(logs.grads[0]["mse"].info.scopes) == ["net", "net/0", "net/2"]
    if name == "lightning_gan":
        causes = {(e.loss, e.producer_scope.split("/")[0], e.cause) for e in graph.blocked_edges}
        assert causes == {
            ("g_loss", "discriminator", fg.CAUSE_TAPE_BOUNDARY),  # toggle_optimizer
            ("d_loss", "generator", fg.CAUSE_STOP_GRADIENT),  # fake.detach()
        }
    if name == "lightning_heads":
        assert logs.steps == [0, 2, 4, 6] and logs.conflict
    if name == "amp":  # unscaled: a cross-entropy's gradient, not 2**16 times it
        norms = [logs.grads[step]["ce"].row("net")["l2"] for step in logs.grad_steps]
        assert norms and all(0 < n < 100 for n in norms), norms
    if name == "compile":
        assert logs.steps[:3] == [0, 10, 20] and logs.drift
    if name == "watch":  # one step per call of train_step, named by call site and renamed
        assert logs.steps[:3] == [0, 10, 20]
        assert sorted(logs.drift) == ["actor_target<-actor", "critic_target<-critic"]
    if name == "sb3":  # one step per gradient step; SB3's own names and tau
        assert logs.steps[:3] == [0, 10, 20]
        (series,) = logs.drift.values()
        assert series[-1][1].info.attrs["tau"] == 0.005
    if name == "frozen":
        (edge,) = {(e.cause, e.producer_scope.split("/")[0]) for e in graph.blocked_edges}
        assert edge == (fg.CAUSE_TAPE_BOUNDARY, "encoder")
