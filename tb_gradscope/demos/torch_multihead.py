"""Demo `torch_multihead`: seed 01's Agent in PyTorch, a shared layer, two heads, per-head optimizers.

`Agent.layer1` feeds two heads, `layer2_1` (loss1) and `layer2_2` (loss2).
As in the `multihead` demo, loss1 trains layer1 + layer2_1 and loss2 only its
head, layer2_2, on the features loss1 learns: two Adam optimizers over those
parameter groups. The leaky twin is the TF port that trusts the groups to do
what `var_list` did. In PyTorch they cannot: one backward of both losses
accumulates loss2's gradient into `layer1.weight.grad`, and the optimizer that
owns layer1 applies it. The clean twin says it where PyTorch needs it,
`layer2_2(h.detach())`, so loss2 reads layer1 without training it: its cell
there is `blocked`, the leaky twin's `updates`.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tb_gradscope.demos import torch_common
from tb_gradscope.demos.multihead_task import BATCH, INPUT_DIM, N1, RULES, make_task
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec


class Agent(nn.Module):
    """The seed's graph: X -> layer1 -> (layer2_1 -> y1, layer2_2 -> y2)."""

    def __init__(self, detach_head2: bool):
        super().__init__()
        self.layer1 = nn.Linear(INPUT_DIM, N1)
        self.layer2_1 = nn.Linear(N1, 1)
        self.layer2_2 = nn.Linear(N1, 1)
        self.detach_head2 = detach_head2

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.layer1(x)
        h2 = h.detach() if self.detach_head2 else h  # loss2 reads layer1, never trains it
        return self.layer2_1(h), self.layer2_2(h2)


def train(spec: RunSpec) -> RunResult:
    """Trains one twin: each step, one backward of both losses and both optimizers' steps."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"torch_multihead has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    torch_common.seed_everything(spec.seed)
    agent = Agent(detach_head2=spec.twin == CLEAN)
    opt1 = torch.optim.Adam([*agent.layer1.parameters(), *agent.layer2_1.parameters()], 1e-2)
    opt2 = torch.optim.Adam(agent.layer2_2.parameters(), 1e-2)
    rec = torch_common.recorder(spec, {"Agent": agent}, [opt1, opt2], RULES)
    x, y1, y2 = torch_common.tensors(*make_task(spec.seed))
    rng = np.random.default_rng(spec.seed)
    loss1 = loss2 = torch.tensor(float("nan"))
    for step in range(spec.steps):
        idx = torch.from_numpy(rng.integers(0, len(x), size=BATCH))
        p1, p2 = agent(x[idx])
        loss1 = F.mse_loss(p1, y1[idx])
        loss2 = F.mse_loss(p2, y2[idx])
        opt1.zero_grad()
        opt2.zero_grad()
        rec.backward({"loss1": loss1, "loss2": loss2})
        opt1.step()
        opt2.step()
        spec.on_step(step + 1)
    rec.close()
    return RunResult({"loss1": loss1.item(), "loss2": loss2.item()})


DEMO = Demo(
    name="torch_multihead",
    title="seed 01's Agent in PyTorch: loss1 trains layer1 + layer2_1, loss2 only layer2_2 "
    "(per-head optimizers, head 2 on detached features)",
    leak="head 2 reads layer1 without .detach(): its optimizer groups alone do not keep "
    "loss2 off the shared layer1",
    rules=RULES,
    train=train,
    default_steps=300,
)
