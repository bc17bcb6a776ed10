"""The PyTorch oracle itself, on a hand-built step whose answer is known.

One step, four cells of every kind: the online network updates, a network
read behind `.detach()` is blocked, one that gets the gradient but is in no
optimizer is ignored, one the loss never reads is independent. And the oracle
looks without touching: parameters, buffers, `.grad`, the optimizer's state,
its step hooks and the RNG are as they were, and a TorchFunctionMode (a
recorder's capture) sees none of its torch calls.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from tests.support.torch_corpus import kit, oracle
from tests.support.torch_corpus.spec import LossProbe, StepProbe


def _step():
    kit.seed(0)
    nets = {name: kit.mlp([3, 2]) for name in ("online", "cut", "free", "unread")}
    nets["online"].add_module("bn", torch.nn.BatchNorm1d(2))
    opt = torch.optim.Adam(nets["online"].parameters(), lr=0.1)
    b = kit.batch(0)

    def loss():
        noise = torch.randn(kit.BATCH, 2)  # the RNG: the same draw every time
        return F.mse_loss(
            nets["online"](b["s"]) + nets["free"](b["s"]) + noise,
            nets["cut"](b["s2"]).detach(),
        )

    return nets, opt, StepProbe([LossProbe("l", loss, [opt])], nets)


def test_oracle_tells_each_flow_state_of_a_known_step():
    _, _, probe = _step()
    states = oracle.torch_truth(probe).states["l"]
    assert {scope: states[scope] for scope in ("online", "cut", "free", "unread")} == {
        "online": "updates",
        "cut": "blocked",
        "free": "ignored",
        "unread": "independent",
    }
    assert states["online/l1"] == states["online/bn"] == "updates"


def test_oracle_leaves_the_step_as_it_found_it():
    nets, opt, probe = _step()
    calls = []
    opt.register_step_pre_hook(lambda *args: calls.append("pre"))
    opt.register_step_post_hook(lambda *args: calls.append("post"))
    opt.zero_grad()
    F.mse_loss(nets["online"](kit.batch(1)["s"]), torch.zeros(kit.BATCH, 2)).backward()
    opt.step()  # an Adam state to keep
    calls.clear()
    for p in nets["cut"].parameters():
        p.grad = torch.ones_like(p)
    before = {k: v.clone() for m in nets.values() for k, v in m.state_dict().items()}
    params = [p for m in nets.values() for p in m.parameters()]
    grads = [(p, None if p.grad is None else p.grad.clone()) for p in params]
    adam = {(id(p), k): v.clone() for p, st in opt.state.items() for k, v in st.items()}
    rng = torch.get_rng_state()

    class Capture(TorchFunctionMode):  # what a recorder capturing the step's dataflow sees
        def __torch_function__(self, func, types, args=(), kwargs=None):
            calls.append(func)
            return func(*args, **(kwargs or {}))

    with Capture():
        oracle.torch_truth(probe)

    after = {k: v for m in nets.values() for k, v in m.state_dict().items()}
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all((p.grad is None) == (g is None) for p, g in grads)
    assert all(torch.equal(p.grad, g) for p, g in grads if g is not None)
    assert all(torch.equal(adam[id(p), k], v) for p, st in opt.state.items() for k, v in st.items())
    assert torch.equal(torch.get_rng_state(), rng)
    assert calls == [], "a hook or a TorchFunctionMode saw the oracle's own torch calls"
