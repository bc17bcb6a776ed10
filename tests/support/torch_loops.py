"""Tiny PyTorch training loops for the recorder's tests: DQN, DDPG, a BYOL-like EMA,
and for watch mode (no `rec.backward`, only `loss.backward()`): SAC, TD3 with a
delayed actor, and a gradient accumulated over several backwards.

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
    watched: bool = False,
    **kw,
) -> list[torch.Tensor]:
    """A DQN with a hard-copied target; `leak` computes the TD target with gradient;
    `observed` runs the loop's own `loss.backward()` between `rec.observe_backward`
    and `rec.backward_observed` (as the callbacks do) instead of `rec.backward`;
    `watched` runs it in watch mode (`rec.watch()` until `rec.close()`): the loss
    ("loss" at its call site) is renamed "td" and the optimizer, not passed, is
    found by watch mode."""
    torch.manual_seed(seed)
    q = mlp(4, 8, 2)
    q_target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), 1e-2)
    rec = None
    if logdir is not None:
        if watched:
            kw.setdefault("losses", {"loss": "td"})
        rec = Recorder(
            logdir,
            every_n_steps=kw.pop("every_n_steps", 5),
            models={"online": q, "target": q_target},
            optimizers=[] if watched else [opt],
            pairs=[pair_models(q_target, q, every=10)],
            **kw,
        )
        if watched:
            rec.watch()
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
        if rec is None or watched:
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


def sac(
    logdir: Any = None, steps: int = 9, seed: int = 0, mode: str = "watch"
) -> list[torch.Tensor]:
    """SAC as Stable-Baselines3 trains it: the entropy coefficient's, the
    critic's and the actor's losses, three optimizers, a Polyak critic target.
    `mode`: "watch" (only `loss.backward()`, inside `rec.watch()`, no optimizer
    passed) or "block" (`rec.step()` and `rec.backward`, the optimizers passed)."""
    torch.manual_seed(seed)
    actor, critic = mlp(3, 8, 1), mlp(4, 8, 1)
    critic_target = copy.deepcopy(critic)
    ent = nn.Module()
    ent.log_coef = nn.Parameter(torch.zeros(1))
    ent_opt = torch.optim.Adam(ent.parameters(), 1e-3)
    critic_opt = torch.optim.Adam(critic.parameters(), 1e-3)
    actor_opt = torch.optim.Adam(actor.parameters(), 1e-3)
    rec = None
    if logdir is not None:
        rec = Recorder(
            logdir,
            every_n_steps=4,
            models={"actor": actor, "critic": critic, "critic_target": critic_target, "ent": ent},
            optimizers=[ent_opt, critic_opt, actor_opt] if mode == "block" else [],
            pairs=[pair_models(critic_target, critic, tau=0.005)],
        )
    watching = rec.watch() if rec is not None and mode == "watch" else _nothing()
    block = rec is not None and mode == "block"

    with watching:
        for _ in range(steps):
            s, a, r, s2 = (
                torch.randn(8, 3),
                torch.randn(8, 1),
                torch.randn(8, 1),
                torch.randn(8, 3),
            )
            with rec.step() if block else _nothing():
                a_pi, log_prob = _squashed(actor, s)
                ent_coef = torch.exp(ent.log_coef.detach())
                ent_coef_loss = -(ent.log_coef * (log_prob - 1.0).detach()).mean()
                ent_opt.zero_grad()
                if block:
                    rec.backward({"ent_coef_loss": ent_coef_loss})
                else:
                    ent_coef_loss.backward()
                ent_opt.step()
                with torch.no_grad():
                    a2, log_prob2 = _squashed(actor, s2)
                    q_next = critic_target(torch.cat([s2, a2], 1)) - ent_coef * log_prob2
                    y = r + 0.99 * q_next
                critic_loss = F.mse_loss(critic(torch.cat([s, a], 1)), y)
                critic_opt.zero_grad()
                if block:
                    rec.backward({"critic_loss": critic_loss})
                else:
                    critic_loss.backward()
                critic_opt.step()
                actor_loss = (ent_coef * log_prob - critic(torch.cat([s, a_pi], 1))).mean()
                actor_opt.zero_grad()
                if block:
                    rec.backward({"actor_loss": actor_loss})
                else:
                    actor_loss.backward()
                actor_opt.step()
                _polyak(critic_target, critic, 0.005)
    if rec is not None:
        rec.close()
    return [p.detach().clone() for m in (actor, critic, critic_target, ent) for p in m.parameters()]


def td3(logdir: Any = None, steps: int = 8, seed: int = 0, watched: bool = True):
    """TD3's delayed actor, watched: the critic trains every step, the actor and
    both Polyak targets every second step. Returns (parameters, recorder)."""
    torch.manual_seed(seed)
    actor, critic = mlp(3, 8, 1), mlp(4, 8, 1)
    actor_target, critic_target = copy.deepcopy(actor), copy.deepcopy(critic)
    actor_opt = torch.optim.Adam(actor.parameters(), 1e-3)
    critic_opt = torch.optim.Adam(critic.parameters(), 1e-3)
    rec = None
    if logdir is not None:
        rec = Recorder(
            logdir,
            every_n_steps=1,
            models={
                "actor": actor,
                "critic": critic,
                "actor_target": actor_target,
                "critic_target": critic_target,
            },
        )
    with rec.watch() if rec is not None and watched else _nothing():
        for step in range(steps):
            s, a, r, s2 = (
                torch.randn(8, 3),
                torch.randn(8, 1),
                torch.randn(8, 1),
                torch.randn(8, 3),
            )
            with torch.no_grad():
                noise = (0.2 * torch.randn(8, 1)).clamp(-0.5, 0.5)
                a2 = (actor_target(s2) + noise).clamp(-1, 1)
                y = r + 0.99 * critic_target(torch.cat([s2, a2], 1))
            critic_loss = F.mse_loss(critic(torch.cat([s, a], 1)), y)
            critic_opt.zero_grad()
            critic_loss.backward()
            critic_opt.step()
            if step % 2 == 0:
                actor_loss = -critic(torch.cat([s, actor(s)], 1)).mean()
                actor_opt.zero_grad()
                actor_loss.backward()
                actor_opt.step()
                _polyak(critic_target, critic, 0.005)
                _polyak(actor_target, actor, 0.005)
    if rec is not None:
        rec.close()
    params = [p.detach().clone() for m in (actor, critic) for p in m.parameters()]
    return params, rec


def accumulated(logdir: Any = None, steps: int = 4, micro: int = 3, seed: int = 0):
    """A gradient accumulated over `micro` backwards before each `opt.step()`,
    watched. Returns (parameters, recorder)."""
    torch.manual_seed(seed)
    net = mlp(4, 8, 1)
    opt = torch.optim.SGD(net.parameters(), 0.05)
    rec = Recorder(logdir, every_n_steps=1, models={"net": net}) if logdir is not None else None
    with rec.watch() if rec is not None else _nothing():
        for _ in range(steps):
            opt.zero_grad()
            for _ in range(micro):
                x, y = torch.randn(8, 4), torch.randn(8, 1)
                micro_loss = F.mse_loss(net(x), y) / micro
                micro_loss.backward()
            opt.step()
    if rec is not None:
        rec.close()
    return [p.detach().clone() for p in net.parameters()], rec


def _squashed(actor: nn.Module, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A tanh-squashed Gaussian action and its (simplified) log-probability."""
    mean = actor(s)
    u = mean + 0.1 * torch.randn_like(mean)
    a = torch.tanh(u)
    log_prob = (-0.5 * ((u - mean) / 0.1) ** 2 - torch.log(1 - a.pow(2) + 1e-6)).sum(
        1, keepdim=True
    )
    return a, log_prob


def _polyak(target: nn.Module, online: nn.Module, tau: float) -> None:
    with torch.no_grad():
        for pt, po in zip(target.parameters(), online.parameters()):
            pt.mul_(1 - tau).add_(po, alpha=tau)
