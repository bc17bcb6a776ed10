"""The PyTorch Recorder under DistributedDataParallel: two gloo processes on the CPU.

One launch of two ranks trains every scenario of `torch_ddp_steps` (a few
steps each); the reference runs here, in one process over the whole batch."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest
import torch

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tests.support import torch_ddp_steps as ddp_steps

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
SCOPES = ["net", "net/heads", "net/heads/a", "net/heads/b", "net/trunk"]
RECORDED = [s for s, kw in ddp_steps.SCENARIOS.items() if kw.get("record", True)]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    """The two ranks' output directory, once both exited."""
    out = tmp_path_factory.mktemp("ddp")
    env = dict(os.environ, PYTHONPATH=REPO, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1")
    env["MASTER_PORT"] = str(_free_port())
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.torch_ddp_steps", str(out)],
            env=dict(env, RANK=str(rank)),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    logs = []
    try:
        for proc in procs:
            logs.append(proc.communicate(timeout=240)[0])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    for rank, proc in enumerate(procs):
        assert proc.returncode == 0, f"rank {rank} failed:\n{logs[rank][-3000:]}"
    return out


def _params(out, scenario: str, rank: int) -> list[torch.Tensor]:
    return torch.load(out / f"{scenario}.rank{rank}.pt")


def _said(out, scenario: str, rank: int) -> dict:
    return json.loads((out / f"{scenario}.rank{rank}.json").read_text())


def _run(logdir):
    (run,) = load_logdir(str(logdir))
    return run


def _l2(run, step: int, loss: str) -> np.ndarray:
    table = run.grads[step][loss]
    return np.array([table.row(scope)["l2"] for scope in SCOPES])


def _bitwise(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _hand_norms(grads: dict[str, torch.Tensor]) -> np.ndarray:
    """Per scope of SCOPES, the L2 norm of {parameter name: gradient}."""
    out = []
    for scope in SCOPES:
        prefix = scope.removeprefix("net").lstrip("/").replace("/", ".")
        sq = sum(
            float(g.double().square().sum()) for name, g in grads.items() if name.startswith(prefix)
        )
        out.append(np.sqrt(sq))
    return np.array(out)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process over the whole batch, recorded; and, at each recorded step,
    each loss's gradient over rank 0's half of the batch, by hand."""
    logdir = tmp_path_factory.mktemp("reference")
    half: dict[int, dict[str, np.ndarray]] = {}

    def probe(step, net, batch):
        if step % ddp_steps.EVERY:
            return
        x, ya, yb = (t[: ddp_steps.BATCH // 2] for t in batch)
        names = [n for n, _ in net.named_parameters()]
        half[step] = {}
        for loss, value in ddp_steps.losses_of(net, x, ya, yb, two=True).items():
            grads = torch.autograd.grad(
                value, list(net.parameters()), retain_graph=True, allow_unused=True
            )
            half[step][loss] = _hand_norms({n: g for n, g in zip(names, grads) if g is not None})

    micro_rows: dict[int, dict[str, np.ndarray]] = {}

    def micro_probe(step, net, batch):
        # m1: rank 0's first micro-batch; m2: the all-reduced total less it.
        if step % ddp_steps.EVERY:
            return
        names = [n for n, _ in net.named_parameters()]
        grads = [
            [torch.autograd.grad(ddp_steps.fit(net, m), list(net.parameters())) for m in half]
            for half in ddp_steps.micro_batches(batch)
        ]
        total = [sum(g[v] for half in grads for g in half) / 2 for v in range(len(names))]
        own = grads[0][0]
        micro_rows[step] = {
            "m1": _hand_norms(dict(zip(names, own))),
            "m2": _hand_norms({n: t - o for n, t, o in zip(names, total, own)}),
        }

    params = ddp_steps.train(logdir / "one_loss", probe=probe)
    accumulated = ddp_steps.accumulate(probe=micro_probe)
    ddp_steps.train(logdir / "two_losses", two=True)
    return {
        "params": params,
        "one_loss": _run(logdir / "one_loss"),
        "two_losses": _run(logdir / "two_losses"),
        "half": half,
        "accumulated": accumulated,
        "micro_rows": micro_rows,
    }


def test_ddp_trains_as_one_process_over_the_whole_batch(ranks, reference):
    # The premise of every comparison below: same init, same data split.
    for a, b in zip(_params(ranks, "plain", 0), reference["params"]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("scenario", ["one_loss", "observed", "kept_grads", "static_one"])
def test_recorded_norms_are_the_global_gradients_of_the_whole_batch(ranks, reference, scenario):
    # rec.backward, a backward the callbacks observe, a .grad zeroed in place,
    # a static graph (its first iteration's all-reduce is delayed to the backward's end).
    run, ref = _run(ranks / scenario), reference["one_loss"]
    assert run.grad_steps == ref.grad_steps == [0, 2, 4]
    for step in run.grad_steps:
        np.testing.assert_allclose(_l2(run, step, "fit"), _l2(ref, step, "fit"), rtol=1e-5)


def test_only_rank_0_writes_one_event_file(ranks):
    pid = _said(ranks, "one_loss", 0)["pid"]
    for scenario in RECORDED:
        files = os.listdir(ranks / scenario)
        assert len(files) == 1, (scenario, files)
        assert f".{pid}." in files[0], (scenario, files)


def test_scope_names_drop_ddps_module_wrapper(ranks):
    run = _run(ranks / "one_loss")
    assert list(run.grads[0]["fit"].info.scopes) == SCOPES
    assert run.flowgraph.source == "torch"
    assert {run.flowgraph.cells["fit"][scope] for scope in SCOPES} == {fmt.UPDATES}


@pytest.mark.parametrize(
    "recorded, plain",
    [
        ("one_loss", "plain"),
        ("observed", "plain"),
        ("kept_grads", "plain"),
        ("two_losses", "plain"),
        ("fails_on_rank0", "plain"),
        ("find_unused", "plain_unused"),
        ("static_graph", "plain_static"),
        ("static_one", "plain"),
        ("accumulate", "plain_accumulate"),
    ],
)
def test_recording_under_ddp_changes_no_rank_bitwise(ranks, recorded, plain):
    for rank in (0, 1):
        assert _bitwise(_params(ranks, recorded, rank), _params(ranks, plain, rank)), rank


def test_several_losses_in_one_backward_record_rank_0s_own_gradients(ranks, reference):
    # Per-loss global norms would need a collective of the recorder's own:
    # with several losses in one backward, each loss's row is rank 0's
    # gradient of that loss over its half of the batch.
    for scenario in ("two_losses", "find_unused"):
        run = _run(ranks / scenario)
        assert run.grad_steps == [0, 2, 4]
        for step in run.grad_steps:
            for loss in ("a", "b"):
                np.testing.assert_allclose(
                    _l2(run, step, loss), reference["half"][step][loss], rtol=1e-5, atol=1e-7
                )
    # ... which is not the whole batch's.
    run, ref = _run(ranks / "two_losses"), reference["two_losses"]
    assert not np.allclose(_l2(run, 2, "a"), _l2(ref, 2, "a"), rtol=1e-3)


def test_gradient_accumulation_under_no_sync_records_what_each_backward_added(ranks, reference):
    # The ranks synced at the second micro-batch: one process's update.
    for a, b in zip(_params(ranks, "accumulate", 0), reference["accumulated"]):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    run = _run(ranks / "accumulate")
    assert run.grad_steps == [0, 2, 4]
    for step in run.grad_steps:
        for loss in ("m1", "m2"):  # rank 0's own; the all-reduced total less it
            np.testing.assert_allclose(
                _l2(run, step, loss), reference["micro_rows"][step][loss], rtol=1e-5, atol=1e-7
            )


def test_a_recorder_failing_on_rank_0_alone_blocks_no_rank(ranks):
    # Both ranks finished (the fixture) with the same parameters (above);
    # rank 0 said why it stopped, and kept what it wrote before.
    (said,) = _said(ranks, "fails_on_rank0", 0)["warnings"]
    assert "injected recorder failure" in said and "training continues" in said
    assert _said(ranks, "fails_on_rank0", 1)["warnings"] == []
    assert _run(ranks / "fails_on_rank0").grad_steps == [0]


def test_static_graph_is_recorded_without_starting_ddps_delayed_all_reduce(ranks, reference):
    run = _run(ranks / "static_graph")
    # Step 0 (DDP's first static-graph iteration) has no per-loss rows: taking
    # them would run DDP's delayed all-reduce inside the recorder, on rank 0 alone.
    assert run.grad_steps == [2, 4]
    for step in run.grad_steps:
        for loss in ("a", "b"):
            np.testing.assert_allclose(
                _l2(run, step, loss), reference["half"][step][loss], rtol=1e-5, atol=1e-7
            )
