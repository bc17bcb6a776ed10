"""Seed 01 and the PyTorch ways of cutting or keeping a path.

- multihead (seed 01): a shared layer and two heads, one optimizer per loss
  over its own parameters (loss1: layer1 + layer2_1, loss2: layer2_2), each
  loss its own backward and step in one `rec.step()`; mutants: loss2's
  optimizer over every parameter (multihead_leaky), and both losses in one
  summed backward before both steps, so loss1's optimizer applies loss2's
  gradient to layer1 (multihead_summed_leaky).
- multitask: a shared trunk, two independent heads, one optimizer; mutant:
  head b's output adds head a's, not detached.
- frozen: a layer frozen with `requires_grad_(False)` and left out of the
  optimizer; mutant: the freeze forgotten.
- custom_function: a custom `autograd.Function` whose backward returns None
  between an encoder and a decoder.
- item_constant: the critic's value read with `.item()` re-enters the actor's
  loss as a Python number.
- autograd_grad: gradients of two micro-batches from `torch.autograd.grad`,
  summed, handed to `rec.record_gradients` and to `.grad`; the TD target's
  next value `.detach()`ed.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tb_gradscope.torch import Recorder
from tests.support.torch_corpus import kit
from tests.support.torch_corpus.spec import DETACH, FROZEN, ITEM, LossProbe, Shape, StepProbe

OBS = kit.OBS

# ----- seed 01: multi-head Agent with per-head optimizers ------------------------------

MULTIHEAD_RULES = (
    "never(loss2, Agent/layer1)",
    "only(loss2, [Agent/layer2_2])",
    "never(loss1, Agent/layer2_2)",
)


class Agent(nn.Module):
    """Seed 01's agent: layer1 shared, heads layer2_1 and layer2_2."""

    def __init__(self):
        super().__init__()
        self.layer1 = nn.Linear(OBS, 4)
        self.layer2_1 = nn.Linear(4, 1)
        self.layer2_2 = nn.Linear(4, 1)

    def forward(self, x):
        s = torch.tanh(self.layer1(x))
        return self.layer2_1(s), self.layer2_2(s)


def _multihead(variant: str):
    """variant: "" (correct), "all" (loss2's optimizer over everything) or "summed"."""

    def train(logdir, observer):
        kit.seed(11)
        agent = Agent()
        opt1 = torch.optim.Adam(kit.parameters(agent.layer1, agent.layer2_1), lr=0.01)
        opt2 = torch.optim.Adam(
            agent.parameters() if variant == "all" else agent.layer2_2.parameters(), lr=0.01
        )
        models = {"Agent": agent}
        rec = Recorder(
            logdir,
            every_n_steps=1,
            models=models,
            optimizers=[opt1, opt2],
            rules=list(MULTIHEAD_RULES),
        )

        def loss1(b):
            return F.mse_loss(agent(b["s"])[0], b["y"])

        def loss2(b):
            return F.mse_loss(agent(b["s"])[1], -b["y"])

        both = [opt1, opt2] if variant == "summed" else None
        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [
                        LossProbe("loss1", lambda: loss1(b), both or [opt1]),
                        LossProbe("loss2", lambda: loss2(b), both or [opt2]),
                    ],
                    models,
                ),
            )
            with rec.step():
                if variant == "summed":
                    opt1.zero_grad()
                    opt2.zero_grad()
                    rec.backward({"loss1": loss1(b), "loss2": loss2(b)})
                    opt1.step()
                    opt2.step()
                else:
                    opt1.zero_grad()
                    rec.backward({"loss1": loss1(b)})
                    opt1.step()
                    opt2.zero_grad()
                    rec.backward({"loss2": loss2(b)})
                    opt2.step()
            observer.after(step)
        rec.close()

    return train


# ----- multi-task: a shared trunk, independent heads ---------------------------------------

MULTITASK_RULES = ("never(task_a, mt/head_b)", "never(task_b, mt/head_a)")


class MultiTask(nn.Module):
    def __init__(self, cross_talk: bool):
        super().__init__()
        self.cross_talk = cross_talk
        self.trunk = nn.Linear(OBS, 5)
        self.head_a = nn.Linear(5, 1)
        self.head_b = nn.Linear(5, 1)

    def forward(self, x):
        h = torch.tanh(self.trunk(x))
        a = self.head_a(h)
        b = self.head_b(h)
        return a, (b + a if self.cross_talk else b)


def _multitask(leaky: bool):
    def train(logdir, observer):
        kit.seed(16)
        mt = MultiTask(cross_talk=leaky)
        opt = torch.optim.Adam(mt.parameters(), lr=0.01)
        models = {"mt": mt}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[opt], rules=list(MULTITASK_RULES)
        )

        def losses(b):
            ya, yb = mt(b["s"])
            return {"task_a": F.mse_loss(ya, b["y"]), "task_b": F.mse_loss(yb, -2.0 * b["y"])}

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [LossProbe(n, lambda n=n: losses(b)[n], [opt]) for n in ("task_a", "task_b")],
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


# ----- a frozen layer -----------------------------------------------------------------------

FROZEN_RULES = ("blocked(fit, net/l1)", "never(fit, net/l1)")


def _frozen(leaky: bool):
    def train(logdir, observer):
        kit.seed(17)
        net = kit.mlp([4, 4, 1])
        if not leaky:
            net.l1.requires_grad_(False)  # a pretrained feature layer
        opt = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.05)
        models = {"net": net}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[opt], rules=list(FROZEN_RULES)
        )

        def fit_loss(b):
            return F.mse_loss(net(b["s"]), b["y"])

        for step in range(4):
            b = kit.batch(step)
            observer.before(step, StepProbe([LossProbe("fit", lambda: fit_loss(b), [opt])], models))
            loss = fit_loss(b)
            opt.zero_grad()
            rec.backward({"fit": loss})
            opt.step()
            observer.after(step)
        rec.close()

    return train


# ----- a custom autograd.Function without a gradient ----------------------------------------

CUSTOM_RULES = ("blocked(recon, encoder/*)", "only(recon, [decoder])")


class RoundNoGrad(torch.autograd.Function):
    """Rounds to a grid of quarters; its backward gives no gradient."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x * 4.0) / 4.0

    @staticmethod
    def backward(ctx, grad):
        return None


def _custom_function():
    def train(logdir, observer):
        kit.seed(18)
        encoder, decoder = kit.mlp([4, 3]), kit.mlp([4, 1], inputs=3)
        opt = torch.optim.Adam(kit.parameters(encoder, decoder), lr=0.01)
        models = {"encoder": encoder, "decoder": decoder}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[opt], rules=list(CUSTOM_RULES)
        )

        def recon_loss(b):
            return F.mse_loss(decoder(RoundNoGrad.apply(encoder(b["s"]))), b["y"])

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step, StepProbe([LossProbe("recon", lambda: recon_loss(b), [opt])], models)
            )
            loss = recon_loss(b)
            opt.zero_grad()
            rec.backward({"recon": loss})
            opt.step()
            observer.after(step)
        rec.close()

    return train


# ----- a value read with .item() re-entering as a constant -----------------------------------

ITEM_RULES = ("blocked(actor, critic/*)", "never(actor, critic/*)")


def _item_constant():
    def train(logdir, observer):
        kit.seed(19)
        actor, critic = kit.mlp([4, kit.ACTIONS]), kit.mlp([4, 1])
        opt = torch.optim.Adam(kit.parameters(actor, critic), lr=0.01)
        models = {"actor": actor, "critic": critic}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[opt], rules=list(ITEM_RULES)
        )

        def losses(b):
            baseline = critic(b["s"]).mean().item()
            logp = F.log_softmax(actor(b["s"]), dim=1).gather(1, b["a"][:, None]).squeeze(1)
            return {
                "actor": -(logp * (b["r"] - baseline)).mean(),
                "critic": F.mse_loss(critic(b["s"])[:, 0], b["r"]),
            }

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


# ----- gradients the user computed with torch.autograd.grad ------------------------------

GRAD_RULES = ("never(td, target/*)", "blocked(td, target/*)", "only(td, [online])")


def _autograd_grad():
    def train(logdir, observer):
        kit.seed(20)
        online, target = kit.mlp([4, kit.ACTIONS]), kit.mlp([4, kit.ACTIONS])
        kit.copy_weights(target, online)
        opt = torch.optim.SGD(online.parameters(), lr=0.1)
        models = {"online": online, "target": target}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[opt], rules=list(GRAD_RULES)
        )
        params = list(online.parameters())

        def td_loss(b):
            y = b["r"] + 0.9 * target(b["s2"]).max(1).values.detach()
            return F.mse_loss(online(b["s"]).gather(1, b["a"][:, None]).squeeze(1), y)

        for step in range(4):
            micro = kit.batch(2 * step), kit.batch(2 * step + 1)
            observer.before(
                step,
                StepProbe(
                    [LossProbe("td", lambda: td_loss(micro[0]) + td_loss(micro[1]), [opt])], models
                ),
            )
            grads = [torch.autograd.grad(td_loss(b), params) for b in micro]
            summed = [g1 + g2 for g1, g2 in zip(*grads)]
            rec.record_gradients({"td": dict(zip(params, summed))})
            for p, g in zip(params, summed):
                p.grad = g
            opt.step()
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "multihead",
        _multihead(""),
        MULTIHEAD_RULES,
        note="seed 01: shared layer, two heads, one optimizer per loss, each loss its own backward "
        "and step",
    ),
    Shape(
        "multihead_leaky",
        _multihead("all"),
        MULTIHEAD_RULES,
        mutant_of="multihead",
        note="loss2's optimizer over every parameter",
    ),
    Shape(
        "multihead_summed_leaky",
        _multihead("summed"),
        MULTIHEAD_RULES,
        mutant_of="multihead",
        note="one summed backward before both steps: loss1's optimizer applies loss2's gradient",
    ),
    Shape(
        "multitask",
        _multitask(False),
        MULTITASK_RULES,
        note="multi-task: shared trunk, two independent heads, one optimizer",
    ),
    Shape(
        "multitask_leaky",
        _multitask(True),
        MULTITASK_RULES,
        mutant_of="multitask",
        note="head b's output adds head a's, not detached",
    ),
    Shape(
        "frozen",
        _frozen(False),
        FROZEN_RULES,
        causes=(FROZEN,),
        note="a layer frozen with requires_grad_(False), left out of the optimizer",
    ),
    Shape(
        "frozen_leaky",
        _frozen(True),
        FROZEN_RULES,
        mutant_of="frozen",
        note="the freeze forgotten: the layer trains",
    ),
    Shape(
        "custom_function",
        _custom_function(),
        CUSTOM_RULES,
        causes=(("custom_gradient_none", "RoundNoGrad"),),
        note="a custom autograd.Function whose backward returns None",
    ),
    Shape(
        "item_constant",
        _item_constant(),
        ITEM_RULES,
        causes=(ITEM,),
        note="the critic's value read with .item() re-enters the actor's loss as a number",
    ),
    Shape(
        "autograd_grad",
        _autograd_grad(),
        GRAD_RULES,
        causes=(DETACH,),
        note="gradients of two micro-batches from torch.autograd.grad, summed, handed to "
        "rec.record_gradients",
    ),
]
