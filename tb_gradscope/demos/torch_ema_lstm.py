"""Demo `torch_ema_lstm`: the `ema_lstm` demo in PyTorch, a target LSTM kept as an EMA (seed 03).

The online LSTM learns the discounted sum of a noisy sine's future values by
TD; the TD target comes from a target LSTM under `torch.no_grad()`, and after
every optimizer step the target moves by Polyak averaging
(`target <- decay * target + (1 - decay) * online`, in place). The clean twin
starts the target as `copy.deepcopy(online)`; the leaky twin builds it as a
second, freshly initialised `ValueLSTM()` (the seed's missing "Change0"), so
the target starts unrelated to the online net and only slowly tracks it:
early TD targets are noise, and the pair's drift says so.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from tb_gradscope.demos import torch_common
from tb_gradscope.demos.ema_lstm_task import BATCH, DECAY, GAMMA, RULES, UNITS, sample_windows
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec


class ValueLSTM(nn.Module):
    """A window of observations -> LSTM -> a scalar value (scopes `<model>/lstm`, `<model>/v`)."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(1, UNITS, batch_first=True)
        self.v = nn.Linear(UNITS, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, (h, _) = self.lstm(x)
        return self.v(h[-1]).squeeze(1)


def train(spec: RunSpec) -> RunResult:
    """Trains one twin: an Adam step on the TD loss, then the EMA target update."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"torch_ema_lstm has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    from tb_gradscope.torch import pair_models

    torch_common.seed_everything(spec.seed)
    online = ValueLSTM()
    target = copy.deepcopy(online) if spec.twin == CLEAN else ValueLSTM()
    optimizer = torch.optim.Adam(online.parameters(), 3e-3)
    rec = torch_common.recorder(
        spec,
        {"online": online, "target": target},
        [optimizer],
        RULES,
        [pair_models(target, online, tau=1.0 - DECAY)],
    )
    rng = np.random.default_rng(spec.seed)
    td = torch.tensor(float("nan"))
    for step in range(spec.steps):
        s, r, s2 = torch_common.tensors(*sample_windows(rng, BATCH))
        with torch.no_grad():
            v_target = r + GAMMA * target(s2)
        td = F.mse_loss(online(s), v_target)
        optimizer.zero_grad()
        rec.backward({"td": td})
        optimizer.step()
        torch_common.polyak(online, target, 1.0 - DECAY)
        spec.on_step(step + 1)
    rec.close()
    with torch.no_grad():
        gap = torch.sqrt(
            sum(((t - o) ** 2).sum() for t, o in zip(target.parameters(), online.parameters()))
        )
    return RunResult({"td": td.item()}, f"final ||target - online|| = {float(gap):.3f}")


DEMO = Demo(
    name="torch_ema_lstm",
    title="PyTorch LSTM value net with an EMA target LSTM (Polyak averaging in place)",
    leak="target LSTM built fresh instead of copy.deepcopy(online) (the seed's missing 'Change0')",
    rules=RULES,
    train=train,
    default_steps=300,
)
