"""Demo `torch_dqn3_grad_start`: DQN 3.0's update in PyTorch, the gradient started at the Q output (seed 02).

DQN 3.0 computes the clipped TD error outside autodiff and backpropagates
`targets[i][a_i] = delta_i` from the online network's output `q_all`; in
PyTorch that is `q_all.backward(gradient=-targets)`, here
`rec.backward({"td": StartPoint(q_all, -targets / BATCH)})`. The target
network is never touched by the backward. The leaky twin is the port its
author first writes: DQN's clipped error as a loss (`smooth_l1_loss`, whose
gradient is the clipped TD error) and its `.backward()`, through the TD
computation and the target network, with RMSprop over every parameter.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tb_gradscope.demos import torch_cartpole, torch_common
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec
from tb_gradscope.demos.torch_cartpole import BATCH, GAMMA, RULES, Agent

CLIP_DELTA = 1.0


def train(spec: RunSpec) -> RunResult:
    """Trains one twin with RMSprop, DQN 3.0's optimizer family."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(
            f"torch_dqn3_grad_start has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}"
        )
    torch_common.seed_everything(spec.seed)
    outcome = torch_cartpole.run(spec, lambda params: torch.optim.RMSprop(params, 2.5e-4), _update)
    return RunResult({"td": outcome.td}, outcome.env_name)


def _update(agent: Agent):
    """DQN 3.0's update: backprop started at q_all with the clipped TD error
    (the leaky twin differentiates the squared TD error, target network included)."""
    from tb_gradscope.torch import StartPoint

    online, target, optimizer, rec = agent.online, agent.target, agent.optimizer, agent.recorder

    def update(s, a, r, s2, term):
        q2_max = target(s2).max(dim=1).values
        q_all = online(s)
        q = q_all.gather(1, a[:, None]).squeeze(1)
        y = r + GAMMA * (1.0 - term) * q2_max
        optimizer.zero_grad()
        if agent.leaky:
            # DQN's clipped error as a loss (Huber), differentiated through the target network.
            td = F.smooth_l1_loss(q, y, beta=CLIP_DELTA)
            rec.backward({"td": td})
        else:
            delta = (y - q).clamp(-CLIP_DELTA, CLIP_DELTA).detach()
            td = 0.5 * delta.square().mean()
            # targets[i][a_i] = delta_i; descent on -delta * dQ/dw.
            targets = F.one_hot(a, agent.num_actions) * delta[:, None]
            rec.backward({"td": StartPoint(q_all, -targets / BATCH)})
        optimizer.step()
        return td.detach()

    return update


DEMO = Demo(
    name="torch_dqn3_grad_start",
    title="PyTorch DQN 3.0 update: q_all.backward(gradient=...) with the TD error",
    leak="the Huber TD loss's backward through the target network, optimizer over every parameter",
    rules=RULES,
    train=train,
    default_steps=300,
)
