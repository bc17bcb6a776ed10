"""Demo `torch_dqn`: the `dqn` demo in PyTorch, an online and a target network (seed 01).

The clean twin computes the TD target from the target network and `.detach()`es
it, and gives the optimizer only the online parameters; the target moves only
by a hard copy every `SYNC_EVERY` steps. The leaky twin forgets the `.detach()`
and builds its optimizer over both networks' parameters (the common
`Adam(list(q.parameters()) + list(q_target.parameters()))`), so the TD loss
trains the target network: its cells on `target/*` turn to `updates` and the
target moves between copies.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from tb_gradscope.demos import torch_cartpole, torch_common
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec
from tb_gradscope.demos.torch_cartpole import GAMMA, RULES, Agent


def train(spec: RunSpec) -> RunResult:
    """Trains one twin for `spec.steps` Adam steps on CartPole."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"torch_dqn has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    torch_common.seed_everything(spec.seed)
    outcome = torch_cartpole.run(spec, lambda params: torch.optim.Adam(params, 1e-3), _update)
    mean_return = float(np.mean(outcome.returns[-10:])) if outcome.returns else float("nan")
    return RunResult(
        {"td": outcome.td}, f"{outcome.env_name}, mean return of last episodes {mean_return:.1f}"
    )


def _update(agent: Agent):
    """The TD update: its target `.detach()`ed (the leaky twin forgets it)."""
    online, target, optimizer, rec = agent.online, agent.target, agent.optimizer, agent.recorder

    def update(s, a, r, s2, done):
        y = r + GAMMA * (1.0 - done) * target(s2).max(dim=1).values
        if not agent.leaky:
            y = y.detach()
        q_sa = online(s).gather(1, a[:, None]).squeeze(1)
        td = F.mse_loss(q_sa, y)
        optimizer.zero_grad()
        rec.backward({"td": td})  # in place of td.backward()
        optimizer.step()
        return td.detach()

    return update


DEMO = Demo(
    name="torch_dqn",
    title="PyTorch DQN on CartPole: online + target network, hard target copy",
    leak="no .detach() on the TD target, and the target net in the optimizer's parameters",
    rules=RULES,
    train=train,
    default_steps=300,
)
