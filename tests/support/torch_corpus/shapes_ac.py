"""Actor-critic PyTorch shapes: DDPG, TD3, SAC, a shared-trunk actor-critic, A2C.

- ddpg: the backup under `torch.no_grad()`, critic then actor, each with its
  own `zero_grad` / `rec.backward` / `step`, Polyak targets, one `rec.step()`;
  mutants: the backup outside `no_grad` (ddpg_leaky), and one summed backward
  before both steps, so the critic's optimizer applies the actor loss's
  gradient (ddpg_summed_leaky).
- td3: twin critics with one optimizer, actor every 2nd step; mutant: the
  actor's optimizer also given critic1.
- sac: twin Q, the backup under `no_grad`, a temperature with its own
  optimizer reading log pi `.detach()`ed; mutant: log pi not detached.
- actor_critic: a shared trunk, actor + critic summed, one optimizer; mutant:
  the advantage not detached.
- a2c: separate networks, one summed backward, two optimizers; mutant: the
  advantage not detached (the critic's optimizer then applies the actor's
  gradient).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from tb_gradscope.torch import Recorder, pair_models
from tests.support.torch_corpus import kit
from tests.support.torch_corpus.spec import DETACH, NO_GRAD, LossProbe, Shape, StepProbe

GAMMA, TAU, A, OBS = 0.9, 0.05, kit.ACTIONS, kit.OBS


def _q(net, s, a):
    return net(torch.cat([s, a], dim=1))[:, 0]


def _adam(*modules, lr=0.01):
    return torch.optim.Adam(kit.parameters(*modules), lr=lr)


# ----- DDPG --------------------------------------------------------------------

DDPG_RULES = (
    "never(critic, actor/*)",
    "never(actor, critic/*)",
    "never(*, target_*)",
    "blocked(critic, target_critic/*)",
    "blocked(critic, target_actor/*)",
)


def _ddpg(variant: str):
    """variant: "" (correct), "no_cut" or "summed"."""

    def train(logdir, observer):
        kit.seed(3)
        actor, t_actor = kit.mlp([4, A]), kit.mlp([4, A])
        critic, t_critic = kit.mlp([4, 1], OBS + A), kit.mlp([4, 1], OBS + A)
        kit.copy_weights(t_actor, actor)
        kit.copy_weights(t_critic, critic)
        a_opt, c_opt = _adam(actor), _adam(critic)
        models = {
            "actor": actor,
            "critic": critic,
            "target_actor": t_actor,
            "target_critic": t_critic,
        }
        pairs = [pair_models(t_actor, actor, tau=TAU), pair_models(t_critic, critic, tau=TAU)]
        rec = Recorder(
            logdir,
            every_n_steps=1,
            models=models,
            optimizers=[c_opt, a_opt],
            pairs=pairs,
            rules=list(DDPG_RULES),
        )

        def backup(b):
            a2 = torch.tanh(t_actor(b["s2"]))
            return b["r"] + GAMMA * (1.0 - b["done"]) * _q(t_critic, b["s2"], a2)

        def critic_loss(b):
            if variant == "no_cut":
                y = backup(b)
            else:
                with torch.no_grad():
                    y = backup(b)
            return F.mse_loss(_q(critic, b["s"], b["a_cont"]), y)

        def actor_loss(b):
            return -_q(critic, b["s"], torch.tanh(actor(b["s"]))).mean()

        both = [c_opt, a_opt] if variant == "summed" else None
        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [
                        LossProbe("critic", lambda: critic_loss(b), both or [c_opt]),
                        LossProbe("actor", lambda: actor_loss(b), both or [a_opt]),
                    ],
                    models,
                    [
                        kit.pair_probe(t_actor, actor, ("target_actor", "actor")),
                        kit.pair_probe(t_critic, critic, ("target_critic", "critic")),
                    ],
                ),
            )
            with rec.step():
                if variant == "summed":
                    c_opt.zero_grad()
                    a_opt.zero_grad()
                    rec.backward({"critic": critic_loss(b), "actor": actor_loss(b)})
                    c_opt.step()
                    a_opt.step()
                else:
                    c_opt.zero_grad()
                    rec.backward({"critic": critic_loss(b)})
                    c_opt.step()
                    a_opt.zero_grad()
                    rec.backward({"actor": actor_loss(b)})
                    a_opt.step()
                kit.polyak(t_actor, actor, TAU)
                kit.polyak(t_critic, critic, TAU)
            observer.after(step)
        rec.close()

    return train


# ----- TD3 ---------------------------------------------------------------------

TD3_RULES = (
    "only(critic, [critic1, critic2])",
    "never(actor, critic1/*)",
    "never(actor, critic2/*)",
    "never(*, target_*)",
)
POLICY_DELAY = 2


def _td3(leaky: bool):
    def train(logdir, observer):
        kit.seed(4)
        actor, t_actor = kit.mlp([4, A]), kit.mlp([4, A])
        c1, c2 = kit.mlp([4, 1], OBS + A), kit.mlp([4, 1], OBS + A)
        t1, t2 = kit.mlp([4, 1], OBS + A), kit.mlp([4, 1], OBS + A)
        nets = ((t_actor, actor), (t1, c1), (t2, c2))
        for t, o in nets:
            kit.copy_weights(t, o)
        a_opt = _adam(actor, c1) if leaky else _adam(actor)
        c_opt = _adam(c1, c2)
        models = {
            "actor": actor,
            "critic1": c1,
            "critic2": c2,
            "target_actor": t_actor,
            "target_critic1": t1,
            "target_critic2": t2,
        }
        pairs = [pair_models(t, o, tau=TAU) for t, o in nets]
        rec = Recorder(
            logdir,
            every_n_steps=1,
            models=models,
            optimizers=[c_opt, a_opt],
            pairs=pairs,
            rules=list(TD3_RULES),
        )

        def critic_loss(b):
            with torch.no_grad():
                smooth = (0.2 * b["noise"]).clamp(-0.5, 0.5)
                a2 = (torch.tanh(t_actor(b["s2"])) + smooth).clamp(-1.0, 1.0)
                q2 = torch.minimum(_q(t1, b["s2"], a2), _q(t2, b["s2"], a2))
                y = b["r"] + GAMMA * (1.0 - b["done"]) * q2
            return F.mse_loss(_q(c1, b["s"], b["a_cont"]), y) + F.mse_loss(
                _q(c2, b["s"], b["a_cont"]), y
            )

        def actor_loss(b):
            return -_q(c1, b["s"], torch.tanh(actor(b["s"]))).mean()

        names = (
            ("target_actor", "actor"),
            ("target_critic1", "critic1"),
            ("target_critic2", "critic2"),
        )
        for step in range(4):
            b = kit.batch(step)
            losses = [LossProbe("critic", lambda: critic_loss(b), [c_opt])]
            if step % POLICY_DELAY == 0:
                losses.append(LossProbe("actor", lambda: actor_loss(b), [a_opt]))
            observer.before(
                step,
                StepProbe(
                    losses, models, [kit.pair_probe(t, o, n) for (t, o), n in zip(nets, names)]
                ),
            )
            with rec.step():
                c_opt.zero_grad()
                rec.backward({"critic": critic_loss(b)})
                c_opt.step()
                if step % POLICY_DELAY == 0:
                    a_opt.zero_grad()
                    rec.backward({"actor": actor_loss(b)})
                    a_opt.step()
                    for t, o in nets:
                        kit.polyak(t, o, TAU)
            observer.after(step)
        rec.close()

    return train


# ----- SAC ---------------------------------------------------------------------


SAC_RULES = (
    "never(q, pi/*)",
    "never(pi, q1/*)",
    "never(pi, q2/*)",
    "never(*, target_*)",
    "blocked(q, target_q1/*)",
    "blocked(q, target_q2/*)",
    "blocked(q, pi/*)",
    "blocked(alpha, pi/*)",
    "only(alpha, [alpha])",
)
TARGET_ENTROPY = -float(A)


class Temperature(nn.Module):
    """SAC's entropy temperature: one parameter, log alpha (alpha = 0.2 at first)."""

    def __init__(self):
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(math.log(0.2)))


def _sac(leaky: bool):
    def train(logdir, observer):
        kit.seed(102)  # min(q1, q2) picks each critic for some sample at every step
        pi = kit.mlp([4, 2 * A])
        q1, q2 = kit.mlp([4, 1], OBS + A), kit.mlp([4, 1], OBS + A)
        t1, t2 = kit.mlp([4, 1], OBS + A), kit.mlp([4, 1], OBS + A)
        kit.copy_weights(t1, q1)
        kit.copy_weights(t2, q2)
        temp = Temperature()
        q_opt, pi_opt, alpha_opt = _adam(q1, q2), _adam(pi), _adam(temp)
        models = {"pi": pi, "q1": q1, "q2": q2, "target_q1": t1, "target_q2": t2, "alpha": temp}
        pairs = [pair_models(t1, q1, tau=TAU), pair_models(t2, q2, tau=TAU)]
        rec = Recorder(
            logdir,
            every_n_steps=1,
            models=models,
            optimizers=[q_opt, pi_opt, alpha_opt],
            pairs=pairs,
            rules=list(SAC_RULES),
        )

        def sample(s, noise):
            mean, log_std = pi(s).chunk(2, dim=1)
            log_std = log_std.clamp(-5.0, 2.0)
            a = torch.tanh(mean + log_std.exp() * noise)
            logp = (-0.5 * noise**2 - log_std - 0.5 * math.log(2 * math.pi)).sum(1)
            return a, logp - torch.log(1.0 - a**2 + 1e-6).sum(1)

        def q_loss(b):
            with torch.no_grad():
                a2, logp2 = sample(b["s2"], b["noise"].flip(0))
                soft = torch.minimum(_q(t1, b["s2"], a2), _q(t2, b["s2"], a2))
                y = b["r"] + GAMMA * (1.0 - b["done"]) * (soft - temp.log_alpha.exp() * logp2)
            return F.mse_loss(_q(q1, b["s"], b["a_cont"]), y) + F.mse_loss(
                _q(q2, b["s"], b["a_cont"]), y
            )

        def pi_loss(b):
            a, logp = sample(b["s"], b["noise"])
            q = torch.minimum(_q(q1, b["s"], a), _q(q2, b["s"], a))
            return (temp.log_alpha.exp() * logp - q).mean()

        def alpha_loss(b):
            _, logp = sample(b["s"], b["noise"])
            if not leaky:
                logp = logp.detach()
            return -(temp.log_alpha * (logp + TARGET_ENTROPY)).mean()

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [
                        LossProbe("q", lambda: q_loss(b), [q_opt]),
                        LossProbe("pi", lambda: pi_loss(b), [pi_opt]),
                        LossProbe("alpha", lambda: alpha_loss(b), [alpha_opt]),
                    ],
                    models,
                    [
                        kit.pair_probe(t1, q1, ("target_q1", "q1")),
                        kit.pair_probe(t2, q2, ("target_q2", "q2")),
                    ],
                ),
            )
            with rec.step():
                for name, fn, opt in (
                    ("q", q_loss, q_opt),
                    ("pi", pi_loss, pi_opt),
                    ("alpha", alpha_loss, alpha_opt),
                ):
                    opt.zero_grad()
                    rec.backward({name: fn(b)})
                    opt.step()
                kit.polyak(t1, q1, TAU)
                kit.polyak(t2, q2, TAU)
            observer.after(step)
        rec.close()

    return train


# ----- actor-critic with a shared trunk, one summed loss ---------------------------

AC_RULES = ("never(actor, ac/critic_head)", "never(critic, ac/actor_head)")


class SharedTrunk(nn.Module):
    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(OBS, 5)
        self.actor_head = nn.Linear(5, A)
        self.critic_head = nn.Linear(5, 1)

    def forward(self, s):
        h = torch.tanh(self.trunk(s))
        return self.actor_head(h), self.critic_head(h)[:, 0]


def _shared_trunk(leaky: bool):
    def train(logdir, observer):
        kit.seed(6)
        ac = SharedTrunk()
        opt = torch.optim.SGD(ac.parameters(), lr=0.05)
        models = {"ac": ac}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[opt], rules=list(AC_RULES)
        )

        def losses(b):
            logits, v = ac(b["s"])
            adv = b["r"] - v
            if not leaky:
                adv = adv.detach()
            logp = F.log_softmax(logits, dim=1).gather(1, b["a"][:, None]).squeeze(1)
            return {"actor": -(logp * adv).mean(), "critic": ((b["r"] - v) ** 2).mean()}

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [LossProbe(n, lambda n=n: losses(b)[n], [opt]) for n in ("actor", "critic")],
                    models,
                ),
            )
            named = losses(b)
            opt.zero_grad()
            rec.backward(named)
            opt.step()
            observer.after(step)
        rec.close()

    return train


# ----- A2C with separate networks, one summed backward, two optimizers ------------------

A2C_RULES = ("blocked(actor, critic/*)", "never(critic, actor/*)", "never(actor, critic/*)")


def _a2c(leaky: bool):
    def train(logdir, observer):
        kit.seed(7)
        actor, critic = kit.mlp([4, A]), kit.mlp([4, 1])
        a_opt, c_opt = _adam(actor), _adam(critic, lr=0.02)
        models = {"actor": actor, "critic": critic}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[a_opt, c_opt], rules=list(A2C_RULES)
        )

        def actor_loss(b):
            adv = b["r"] - critic(b["s"])[:, 0]
            if not leaky:
                adv = adv.detach()
            logp = F.log_softmax(actor(b["s"]), dim=1).gather(1, b["a"][:, None]).squeeze(1)
            return -(logp * adv).mean()

        def critic_loss(b):
            return ((b["r"] - critic(b["s"])[:, 0]) ** 2).mean()

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [
                        LossProbe("actor", lambda: actor_loss(b), [a_opt, c_opt]),
                        LossProbe("critic", lambda: critic_loss(b), [a_opt, c_opt]),
                    ],
                    models,
                ),
            )
            named = {"actor": actor_loss(b), "critic": critic_loss(b)}
            a_opt.zero_grad()
            c_opt.zero_grad()
            rec.backward(named)
            a_opt.step()
            c_opt.step()
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "ddpg",
        _ddpg(""),
        DDPG_RULES,
        causes=(NO_GRAD,),
        note="DDPG: backup under no_grad, critic then actor each with its own backward and step, "
        "Polyak, one rec.step()",
    ),
    Shape(
        "ddpg_leaky",
        _ddpg("no_cut"),
        DDPG_RULES,
        mutant_of="ddpg",
        note="the backup computed outside torch.no_grad()",
    ),
    Shape(
        "ddpg_summed_leaky",
        _ddpg("summed"),
        DDPG_RULES,
        mutant_of="ddpg",
        causes=(NO_GRAD,),
        note="one summed backward before both steps: the critic's optimizer applies the actor's gradient",
    ),
    Shape(
        "td3",
        _td3(False),
        TD3_RULES,
        causes=(NO_GRAD,),
        note="TD3: twin critics, one critic optimizer, actor and targets every 2nd step",
    ),
    Shape(
        "td3_leaky",
        _td3(True),
        TD3_RULES,
        mutant_of="td3",
        causes=(NO_GRAD,),
        note="the actor's optimizer also given critic1",
    ),
    Shape(
        "sac",
        _sac(False),
        SAC_RULES,
        causes=(NO_GRAD, DETACH),
        note="SAC: twin Q, backup under no_grad, temperature with its own optimizer, log pi detached",
    ),
    Shape(
        "sac_leaky",
        _sac(True),
        SAC_RULES,
        mutant_of="sac",
        causes=(NO_GRAD,),
        note="the temperature loss reads log pi without .detach()",
    ),
    Shape(
        "actor_critic",
        _shared_trunk(False),
        AC_RULES,
        causes=(DETACH,),
        note="shared trunk, actor + critic summed, one optimizer, advantage detached",
    ),
    Shape(
        "actor_critic_leaky",
        _shared_trunk(True),
        AC_RULES,
        mutant_of="actor_critic",
        note="advantage not detached",
    ),
    Shape(
        "a2c",
        _a2c(False),
        A2C_RULES,
        causes=(DETACH,),
        note="A2C: separate networks, one summed backward, two optimizers, advantage detached",
    ),
    Shape(
        "a2c_leaky",
        _a2c(True),
        A2C_RULES,
        mutant_of="a2c",
        note="advantage not detached: the critic's optimizer applies the actor's gradient",
    ),
]
