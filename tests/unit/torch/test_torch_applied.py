"""Which optimizer step applies which loss's gradient, followed through `.grad`:
a `zero_grad()` between a loss's backward and a step discards it, a parameter in
two optimizers is applied by each, `record_gradients` feeds the next step like a
backward, and alternating losses (a GAN's) each get their own analysis."""

from __future__ import annotations

import pytest
import torch

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import Recorder
from tests.support import torch_loops


def _two_nets():
    torch.manual_seed(0)
    return torch_loops.mlp(3, 4), torch_loops.mlp(4, 1)


@pytest.mark.parametrize("set_to_none", [True, False])
def test_a_zero_grad_after_the_backward_discards_the_loss_before_the_next_step(
    tmp_path, set_to_none
):
    a, b = _two_nets()
    opt_a, opt_b = torch.optim.SGD(a.parameters(), lr=0.1), torch.optim.SGD(b.parameters(), lr=0.1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"a": a, "b": b}, optimizers=[opt_a, opt_b])
    x = torch.randn(5, 3)
    with rec.step():
        opt_a.zero_grad()
        opt_b.zero_grad()
        rec.backward({"first": b(a(x)).pow(2).mean()})  # reaches a and b
        opt_a.step()
        opt_b.zero_grad(set_to_none=set_to_none)  # throws first's gradient on b away
        rec.backward({"second": b(torch.randn(5, 4)).mean()})
        opt_b.step()
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    cells = run.flowgraph.cells
    assert cells["first"]["a"] == fmt.UPDATES
    assert cells["first"]["b"] == fmt.IGNORED
    assert cells["second"]["b"] == fmt.UPDATES


def test_a_parameter_in_two_optimizers_is_applied_by_each(tmp_path):
    a, b = _two_nets()
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1)
    opt_ab = torch.optim.SGD([*a.parameters(), *b.parameters()], lr=0.1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"a": a, "b": b}, optimizers=[opt_b, opt_ab])
    x = torch.randn(5, 3)
    for step in range(2):
        opt, other = (opt_b, opt_ab) if step == 0 else (opt_ab, opt_b)
        other.zero_grad()
        opt.zero_grad()
        rec.backward({f"fit{step}": b(a(x).detach()).pow(2).mean()})  # b only
        opt.step()  # the one optimizer stepped in the step
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    cells = run.flowgraph.cells
    # b is applied by opt_b, although opt_ab (listed last) holds it too, and by opt_ab
    assert cells["fit0"]["b"] == fmt.UPDATES and cells["fit1"]["b"] == fmt.UPDATES
    assert cells["fit0"]["a"] == fmt.BLOCKED


def test_gradients_given_to_record_gradients_feed_the_next_optimizer_step(tmp_path):
    online, target = _two_nets()
    target = torch_loops.mlp(3, 4)
    opt = torch.optim.SGD(online.parameters(), lr=0.1)
    rec = Recorder(
        tmp_path, every_n_steps=1, models={"online": online, "target": target}, optimizers=[opt]
    )
    params = list(online.parameters())
    for _ in range(2):
        x = torch.randn(5, 3)
        loss = (online(x) - target(x).detach()).pow(2).mean()
        grads = torch.autograd.grad(loss, params)
        rec.record_gradients({"td": dict(zip(params, grads))})
        for p, g in zip(params, grads):
            p.grad = g
        opt.step()
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    cells = run.flowgraph.cells["td"]
    assert cells["online"] == fmt.UPDATES
    assert cells["target"] == fmt.BLOCKED  # the differentiated loss read target through .detach()
    (edge,) = run.flowgraph.blocked_edges
    assert edge.op_name == "Tensor.detach" and edge.source.file.endswith("test_torch_applied.py")


def test_each_given_loss_depends_on_what_its_own_autograd_grad_call_differentiated(tmp_path):
    # Two task losses on their own heads, each differentiated by its own
    # torch.autograd.grad call (PCGrad): task1 never reads head2, so its cell
    # there is independent, not blocked by task2's call.
    trunk, head1, head2 = torch.nn.Linear(3, 4), torch.nn.Linear(4, 1), torch.nn.Linear(4, 1)
    net = torch.nn.ModuleDict({"trunk": trunk, "head1": head1, "head2": head2})
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net}, optimizers=[opt])
    params = list(net.parameters())
    x = torch.randn(5, 3)
    h = torch.relu(trunk(x))
    losses = {"task1": head1(h).pow(2).mean(), "task2": head2(h).pow(2).mean()}
    grads = {
        name: torch.autograd.grad(loss, params, retain_graph=True, allow_unused=True)
        for name, loss in losses.items()
    }
    with rec.step():
        rec.record_gradients({name: dict(zip(params, g)) for name, g in grads.items()})
        for p, g1, g2 in zip(params, grads["task1"], grads["task2"]):
            p.grad = sum(g for g in (g1, g2) if g is not None)
        opt.step()
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    cells = run.flowgraph.cells
    assert cells["task1"]["net/head2"] == fmt.INDEPENDENT
    assert cells["task2"]["net/head1"] == fmt.INDEPENDENT
    assert cells["task1"]["net/head1"] == cells["task2"]["net/head2"] == fmt.UPDATES
    assert run.flowgraph.blocked_edges == []


def test_alternating_losses_are_each_analysed_at_their_first_step(tmp_path):
    gen, disc = _two_nets()
    d_opt, g_opt = torch.optim.SGD(disc.parameters(), lr=0.1), torch.optim.SGD(gen.parameters())
    rec = Recorder(
        tmp_path, every_n_steps=1, models={"gen": gen, "disc": disc}, optimizers=[d_opt, g_opt]
    )
    for step in range(6):
        z = torch.randn(5, 3)
        if step % 2 == 0:
            d_opt.zero_grad()
            rec.backward({"d": disc(gen(z).detach()).mean()})
            d_opt.step()
        else:
            g_opt.zero_grad()
            rec.backward({"g": -disc(gen(z)).mean()})
            g_opt.step()
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    written = [step for step, _ in run.flowgraphs]
    assert written[:2] == [0, 1] and len(written) <= 3  # g at once; captured again once at most
    for step in range(1, 6):
        cells = run.flowgraph_at(step).cells
        assert cells["g"]["disc"] == fmt.IGNORED and cells["g"]["gen"] == fmt.UPDATES
        assert cells["d"]["gen"] == fmt.BLOCKED and cells["d"]["disc"] == fmt.UPDATES


def test_a_clipped_gradient_is_still_applied(tmp_path):
    a, b = _two_nets()
    opt = torch.optim.SGD([*a.parameters(), *b.parameters()], lr=0.1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"a": a, "b": b}, optimizers=[opt])
    opt.zero_grad()
    rec.backward({"fit": b(a(torch.randn(5, 3))).pow(2).mean()})
    torch.nn.utils.clip_grad_norm_([*a.parameters(), *b.parameters()], 1e-3)  # in place
    opt.step()
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    assert set(run.flowgraph.cells["fit"].values()) == {fmt.UPDATES}  # a, b and their layers
