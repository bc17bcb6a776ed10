"""Tiny PyTorch training loops for the recorder's tests: DQN, DDPG, a BYOL-like EMA.

Each loop takes a seed and an optional recorder factory and returns the final
parameters, so the same loop runs with and without a recorder (observation
only) and leaves a run to read back. Everything is small: a step costs well
under a millisecond on one CPU thread.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from tb_gradscope.torch import Recorder, pair_models

MakeRecorder = Callable[..., Recorder] | None


def mlp(*sizes: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def dqn(
    logdir: Any = None,
    steps: int = 21,
    seed: int = 0,
    leak: bool = False,
    observed: bool = False,
    **kw,
) -> list[torch.Tensor]:
    """A DQN with a hard-copied target; `leak` computes the TD target with gradient;
    `observed` runs the loop's own `loss.backward()` between `rec.observe_backward`
    and `rec.backward_observed` (as the callbacks do) instead of `rec.backward`."""
    torch.manual_seed(seed)
    q = mlp(4, 8, 2)
    q_target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), 1e-2)
    rec = None
    if logdir is not None:
        rec = Recorder(
            logdir,
            every_n_steps=kw.pop("every_n_steps", 5),
            models={"online": q, "target": q_target},
            optimizers=[opt],
            pairs=[pair_models(q_target, q, every=10)],
            **kw,
        )
    for step in range(steps):
        s, a = torch.randn(16, 4), torch.randint(0, 2, (16,))
        r, s2 = torch.randn(16), torch.randn(16, 4)
        q_sa = q(s).gather(1, a[:, None]).squeeze(1)
        if leak:
            y = r + 0.99 * q_target(s2).max(1).values
        else:
            with torch.no_grad():
                y = r + 0.99 * q_target(s2).max(1).values  # the TD target's line
        loss = F.mse_loss(q_sa, y)
        opt.zero_grad()
        if rec is None:
            loss.backward()
        elif observed:
            rec.observe_backward({"td": loss})
            loss.backward()
            rec.backward_observed()
        else:
            rec.backward({"td": loss})
        opt.step()
        if step % 10 == 0:
            q_target.load_state_dict(q.state_dict())
    if rec is not None:
        rec.close()
    return [p.detach().clone() for m in (q, q_target) for p in m.parameters()]


def ddpg(
    logdir: Any = None, steps: int = 12, seed: int = 0, tau: float = 0.1
) -> list[torch.Tensor]:
    """DDPG: critic and actor, two optimizers in one step, Polyak targets."""
    torch.manual_seed(seed)
    actor, critic = mlp(3, 8, 1), mlp(4, 8, 1)
    actor_t, critic_t = copy.deepcopy(actor), copy.deepcopy(critic)
    a_opt = torch.optim.Adam(actor.parameters(), 1e-3)
    c_opt = torch.optim.Adam(critic.parameters(), 1e-3)
    rec = None
    if logdir is not None:
        rec = Recorder(
            logdir,
            every_n_steps=4,
            models={
                "actor": actor,
                "critic": critic,
                "actor_target": actor_t,
                "critic_target": critic_t,
            },
            optimizers=[c_opt, a_opt],
            pairs=[pair_models(critic_t, critic, tau=tau), pair_models(actor_t, actor, tau=tau)],
        )
    for _ in range(steps):
        s, a, r, s2 = torch.randn(8, 3), torch.randn(8, 1), torch.randn(8, 1), torch.randn(8, 3)
        block = rec.step() if rec is not None else _nothing()
        with block:
            with torch.no_grad():
                y = r + 0.9 * critic_t(torch.cat([s2, actor_t(s2)], 1))
            critic_loss = F.mse_loss(critic(torch.cat([s, a], 1)), y)
            c_opt.zero_grad()
            _backward(rec, {"critic": critic_loss})
            c_opt.step()
            actor_loss = -critic(torch.cat([s, actor(s)], 1)).mean()
            a_opt.zero_grad()
            _backward(rec, {"actor": actor_loss})
            a_opt.step()
            with torch.no_grad():
                for t_net, o_net in ((critic_t, critic), (actor_t, actor)):
                    for pt, po in zip(t_net.parameters(), o_net.parameters()):
                        pt.mul_(1 - tau).add_(po, alpha=tau)
    if rec is not None:
        rec.close()
    return [p.detach().clone() for m in (actor, critic, actor_t, critic_t) for p in m.parameters()]


def byol(
    logdir: Any = None, steps: int = 10, seed: int = 0, tau: float = 0.05
) -> list[torch.Tensor]:
    """A BYOL-like shape: online encoder + predictor, EMA target encoder via AveragedModel."""
    torch.manual_seed(seed)
    encoder, predictor = mlp(6, 8, 4), mlp(4, 4)
    target = torch.optim.swa_utils.AveragedModel(
        encoder, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(1 - tau)
    )
    opt = torch.optim.SGD([*encoder.parameters(), *predictor.parameters()], 0.05)
    rec = None
    if logdir is not None:
        rec = Recorder(
            logdir,
            every_n_steps=3,
            models={"online": encoder, "predictor": predictor, "target": target},
            optimizers=[opt],
            pairs="auto",
        )
    for _ in range(steps):
        x = torch.randn(8, 6)
        v1, v2 = x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)
        p1 = F.normalize(predictor(encoder(v1)), dim=1)
        with torch.no_grad():
            z2 = F.normalize(target(v2), dim=1)
        loss = (2 - 2 * (p1 * z2).sum(1)).mean()
        opt.zero_grad()
        _backward(rec, {"byol": loss})
        opt.step()
        target.update_parameters(encoder)
    if rec is not None:
        rec.close()
    return [p.detach().clone() for m in (encoder, predictor, target) for p in m.parameters()]


def _backward(rec: Recorder | None, losses: dict[str, torch.Tensor]) -> None:
    if rec is None:
        sum(losses.values()).backward()
    else:
        rec.backward(losses)


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None
