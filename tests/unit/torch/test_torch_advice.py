"""A rule's advice on a PyTorch run is worded in PyTorch: a missing cut is a
`.detach()` (or `torch.no_grad()`), an optimizer writing a scope it must not is
fixed in its param groups; never `tf.stop_gradient` or `var_list`."""

from __future__ import annotations

import torch

from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import Recorder
from tests.support import torch_loops


def test_a_missing_cut_is_told_to_detach(tmp_path):
    torch_loops.dqn(tmp_path, steps=2, leak=True, rules=["blocked(td, target/*)"])
    (run,) = load_logdir(str(tmp_path))
    messages = [e.message for e in run.events if e.name == "blocked(td, target/*)"]
    assert messages and all(".detach()" in m and "tf." not in m for m in messages), messages


def test_an_optimizer_writing_another_losses_scope_is_told_its_param_groups(tmp_path):
    torch.manual_seed(0)
    actor, critic = torch_loops.mlp(3, 1), torch_loops.mlp(4, 1)
    critic_opt = torch.optim.SGD([*critic.parameters(), *actor.parameters()], lr=0.01)
    actor_opt = torch.optim.SGD(actor.parameters(), lr=0.01)
    rec = Recorder(
        tmp_path,
        every_n_steps=1,
        models={"actor": actor, "critic": critic},
        optimizers=[critic_opt, actor_opt],
        rules=["never(td, actor/*)"],
    )
    s, r = torch.randn(8, 3), torch.randn(8)
    with rec.step():
        q = critic(torch.cat([s, actor(s)], 1))[:, 0]
        critic_opt.zero_grad()
        rec.backward({"td": ((r + 0.9 * q.detach() - q) ** 2).mean()})
        critic_opt.step()
        actor_opt.zero_grad()
        rec.backward({"actor": -critic(torch.cat([s, actor(s)], 1)).mean()})
        actor_opt.step()
    rec.close()
    messages = [v.message for v in rec.violations if v.name == "never(td, actor/*)"]
    assert messages and any("param groups" in m for m in messages), messages
    assert not any("var_list" in m or "tf." in m for m in messages), messages
