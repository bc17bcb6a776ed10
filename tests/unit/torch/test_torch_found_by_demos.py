"""Recorder bugs the PyTorch demos and bench_torch ran into, each pinned by a
test of what should hold. Those still open are marked xfail(strict=True): a fix
turns the test into an unexpected pass, which fails the suite until the marker
goes. Fixed ones stay as plain tests."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import Recorder


def _capture_depth() -> int:
    """How many TorchFunctionModes are on the process's stack (a capture is one)."""
    return len(torch.overrides._get_current_function_mode_stack())


def test_two_recorders_built_before_their_first_steps_leave_no_capture_on(tmp_path):
    # bench_torch built every variant's recorder before any stepped, and one
    # capture stayed on, slowing every torch call of the process about 4x.
    depth = _capture_depth()
    nets = {"a": nn.Linear(2, 1), "b": nn.Linear(2, 1)}
    recs = {k: Recorder(str(tmp_path / k), models={k: net}) for k, net in nets.items()}
    for k, net in nets.items():
        recs[k].backward({"loss": net(torch.ones(1, 2)).sum()})
    for rec in recs.values():
        rec.close()
    assert _capture_depth() == depth


@pytest.mark.xfail(
    strict=True,
    reason="_recording.TorchRecording.stepped maps each parameter to one optimizer "
    "(id(p) -> k, the last optimizer holding it wins): a parameter in two optimizers' "
    "param groups counts as applied by the last only, so a loss whose own optimizer "
    "also steps it reads 'ignored' instead of 'updates'",
)
def test_a_parameter_in_two_optimizers_is_updated_by_either(tmp_path):
    actor, critic = nn.Linear(2, 1), nn.Linear(1, 1)
    actor_opt = torch.optim.SGD([*actor.parameters(), *critic.parameters()], 0.1)  # the leak
    critic_opt = torch.optim.SGD(critic.parameters(), 0.1)
    rec = Recorder(
        str(tmp_path),
        every_n_steps=1,
        models={"actor": actor, "critic": critic},
        optimizers=[actor_opt, critic_opt],
    )
    x = torch.ones(4, 2)
    with rec.step():
        critic_opt.zero_grad()
        rec.backward({"critic": (critic(x[:, :1]) - 1).square().mean()})
        critic_opt.step()
        actor_opt.zero_grad()
        rec.backward({"actor": -critic(actor(x)).mean()})
        actor_opt.step()
    rec.close()
    (logs,) = load_logdir(str(tmp_path))
    assert logs.flowgraphs[-1][1].cells["actor"]["critic"] == fmt.UPDATES


@pytest.mark.xfail(
    strict=True,
    reason="_recording.TorchRecording.record_given records the losses' facts but never "
    "adds them to `since`, so the optimizer step that follows consumes none of them: "
    "gradients given through rec.record_gradients read 'ignored' where opt.step() "
    "applies them (docs/TORCH.md's autograd.grad block)",
)
def test_gradients_given_by_record_gradients_feed_the_optimizer_step_that_follows(tmp_path):
    net = nn.Linear(2, 1)
    opt = torch.optim.SGD(net.parameters(), 0.1)
    rec = Recorder(str(tmp_path), every_n_steps=1, models={"net": net}, optimizers=[opt])
    params = list(net.parameters())
    with rec.step():
        grads = torch.autograd.grad(net(torch.ones(3, 2)).square().mean(), params)
        rec.record_gradients({"mse": dict(zip(params, grads))})
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
    rec.close()
    (logs,) = load_logdir(str(tmp_path))
    assert logs.flowgraphs[-1][1].cells["mse"]["net"] == fmt.UPDATES
