"""Zero-code capture: inside `rec.watch()` a plain loop's `loss.backward()` calls
are recorded as `rec.backward` records them, losses named by their call site,
one step per training iteration (DQN, SAC's three optimizers, TD3's delayed
actor, gradient accumulation), training bitwise unchanged."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tests.support import torch_loops


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _run(logdir):
    (run,) = load_logdir(str(logdir))
    return run


@pytest.fixture(scope="module")
def sac_runs(tmp_path_factory):
    """SAC watched (no optimizer passed) and with rec.step() + rec.backward."""
    watched, block = tmp_path_factory.mktemp("sac_watch"), tmp_path_factory.mktemp("sac_block")
    params = {
        "plain": torch_loops.sac(None),
        "watch": torch_loops.sac(watched, mode="watch"),
        "block": torch_loops.sac(block, mode="block"),
    }
    return params, _run(watched), _run(block)


# ----- the same records as rec.backward ------------------------------------


def test_a_watched_dqn_records_the_tables_rec_backward_records(tmp_path):
    torch_loops.dqn(tmp_path / "backward")
    torch_loops.dqn(tmp_path / "watched", watched=True)
    explicit, watched = _run(tmp_path / "backward"), _run(tmp_path / "watched")
    assert watched.grad_steps == explicit.grad_steps == [0, 5, 10, 15, 20]
    for step in explicit.grad_steps:
        assert list(watched.grads[step]) == ["td"]  # "loss" at its call site, renamed
        np.testing.assert_array_equal(
            watched.grads[step]["td"].values, explicit.grads[step]["td"].values
        )
    assert watched.flowgraph.cells == explicit.flowgraph.cells
    assert watched.flowgraph.cells["td"]["target"] == fmt.BLOCKED
    assert {loss.optimizer for loss in watched.flowgraph.losses} == {"opt0"}  # found


def test_a_watched_loop_trains_bitwise_as_the_unwatched(tmp_path, deterministic, sac_runs):
    assert _same(torch_loops.dqn(None), torch_loops.dqn(tmp_path / "dqn", watched=True))
    params, _, _ = sac_runs
    assert _same(params["plain"], params["watch"])
    assert _same(params["plain"], params["block"])
    td3_plain, _ = torch_loops.td3(None)
    td3_watched, _ = torch_loops.td3(tmp_path / "td3")
    assert _same(td3_plain, td3_watched)


def test_unwatch_restores_torch_autograd_backward_exactly(tmp_path):
    original = torch.autograd.backward
    net = torch_loops.mlp(2, 1)
    rec = torch_loops.Recorder(tmp_path, models={"net": net})
    with rec.watch():
        assert torch.autograd.backward is not original
    assert torch.autograd.backward is original
    rec.watch()
    rec.close()  # close unwatches
    assert torch.autograd.backward is original
