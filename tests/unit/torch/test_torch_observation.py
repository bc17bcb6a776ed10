"""Observation only: training with the recorder is bitwise training without it
(under torch.use_deterministic_algorithms), and a failure inside the recorder
warns once and steps aside while the loop goes on."""

from __future__ import annotations

import warnings

import pytest
import torch

from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import GradscopeWarning, Recorder
from tb_gradscope.torch import _stats as stats
from tests.support import torch_loops


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("loop", ["dqn", "ddpg", "byol"])
def test_training_with_the_recorder_is_bitwise_training_without(loop, tmp_path, deterministic):
    run = getattr(torch_loops, loop)
    without = run(None)
    rng_after_without = torch.random.get_rng_state()
    with_recorder = run(tmp_path)
    assert torch.equal(torch.random.get_rng_state(), rng_after_without)  # the RNG untouched
    assert _same(without, with_recorder)
    (logs,) = load_logdir(str(tmp_path))
    assert logs.grad_steps and logs.flowgraph is not None and logs.pairs  # it did record


def test_a_failure_inside_the_recorder_warns_once_and_steps_aside(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(stats, "GradColumns", broken)
    without = torch_loops.dqn(None, steps=12)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with_recorder = torch_loops.dqn(tmp_path, steps=12)
    said = [w for w in seen if issubclass(w.category, GradscopeWarning)]
    assert len(said) == 1
    assert "stopped recording after an error (RuntimeError: injected)" in str(said[0].message)
    assert _same(without, with_recorder)  # training went on, unchanged


def test_after_stepping_aside_backward_still_trains(tmp_path):
    net = torch_loops.mlp(2, 1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net})
    with pytest.warns(GradscopeWarning, match="stopped recording"):
        rec._step_aside(RuntimeError("gone"))
    rec.backward({"l": net(torch.ones(1, 2)).sum()})
    assert net[0].weight.grad is not None and rec.disabled
    rec.close()


def test_a_step_with_nothing_due_leaves_no_work_behind(tmp_path):
    net = torch_loops.mlp(2, 1)
    rec = Recorder(tmp_path, every_n_steps=100, models={"net": net})
    for _ in range(3):
        rec.backward({"l": net(torch.ones(1, 2)).sum()})
    assert rec.step_count == 2
    assert rec._work.work is None and rec._work.capture is None
    rec.close()


def test_the_capture_keeps_no_tensor_alive_during_a_rollout_before_training(tmp_path):
    import gc
    import weakref

    net = torch_loops.mlp(2, 3)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net})
    with torch.no_grad():
        out = net(torch.ones(4, 2))  # e.g. acting in the environment before learning starts
    seen = weakref.ref(out)
    del out
    gc.collect()
    assert seen() is None
    rec.backward({"l": net(torch.ones(1, 2)).sum()})
    rec.close()
    assert torch.overrides._get_current_function_mode_stack() == []


def test_two_recorders_in_one_process_each_see_their_own_step(tmp_path):
    from tb_gradscope import format as fmt

    a_net, b_net = torch_loops.mlp(2, 1), torch_loops.mlp(2, 1)
    rec_a = Recorder(tmp_path / "a", every_n_steps=1, models={"a": a_net})
    rec_b = Recorder(tmp_path / "b", every_n_steps=1, models={"b": b_net})
    for _ in range(2):
        rec_a.backward({"la": a_net(torch.ones(1, 2)).sum()})
        rec_b.backward({"lb": b_net(torch.ones(1, 2)).detach().sum() + b_net[0].bias.sum()})
    rec_a.close()
    rec_b.close()
    assert torch.overrides._get_current_function_mode_stack() == []
    (run_a,) = load_logdir(str(tmp_path / "a"))
    (run_b,) = load_logdir(str(tmp_path / "b"))
    assert run_a.flowgraph.cells["la"]["a/0"] == fmt.UPDATES
    assert run_b.flowgraph.cells["lb"]["b/0"] == fmt.UPDATES  # the bias keeps a path open
    assert run_a.grad_steps == run_b.grad_steps == [0, 1]


def test_a_backward_that_raises_leaves_no_gradient_hook_behind(tmp_path):
    net = torch_loops.mlp(2, 1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net})
    loss = net(torch.ones(1, 2)).sum()
    rec.backward({"l": loss})
    with pytest.raises(RuntimeError, match="second time"):
        rec.backward({"l": loss})  # the graph was freed by the first backward
    assert all(not p._backward_hooks for p in net.parameters())
    rec.backward({"l": net(torch.ones(1, 2)).sum()})
    rec.close()
    assert not rec.disabled
