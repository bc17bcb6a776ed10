"""Value-based PyTorch shapes: DQN three ways, Double DQN, DQN 3.0's start point, an EMA LSTM.

- dqn: the TD target's next value `.detach()`ed, a hard copy every 2 steps;
  mutant: no `.detach()` (the target network gets the TD error's gradient).
- dqn_no_grad: the next value computed under `torch.no_grad()`.
- dqn_inference_mode: under `torch.inference_mode()`, cloned out of it.
- dqn_compiled: the online network `torch.compile`d (eager backend).
- dqn_every_3: dqn recorded every 3 steps, its target copied every 2: drift
  and tau at steps the copy does not line up with.
- dqn_data: the next value read through `.data`.
- double_dqn: the online network picks the next action (argmax, no
  gradient), the target evaluates it, detached; mutant: not detached and the
  optimizer over both networks.
- start_point (seed 02): `q_all` started with the clipped TD error as its
  output gradient (`StartPoint`); mutant: the squared TD error differentiated
  through the target network, the optimizer over everything.
- ema_lstm (seed 03): an LSTM value network, its EMA target evaluated under
  `torch.no_grad()`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from tb_gradscope.torch import Recorder, StartPoint, pair_models
from tests.support.torch_corpus import kit
from tests.support.torch_corpus.spec import DATA, DETACH, NO_GRAD, LossProbe, Shape, StepProbe

GAMMA, COPY_EVERY, TAU, CLIP = 0.9, 2, 0.1, 1.0
A = kit.ACTIONS
RULES = ("never(td, target/*)", "only(td, [online])", "blocked(td, target/*)")


def _dqn(cut: str, every: int = 1, steps: int = 4, compiled: bool = False):
    """cut: "detach", "no_grad", "inference_mode", "data", or "" (the leaky mutant); recorded every `every` steps."""

    def train(logdir, observer):
        kit.seed(1)
        online, target = kit.mlp([4, A]), kit.mlp([4, A])
        kit.copy_weights(target, online)
        raw = online
        if compiled:  # parameters `_orig_mod.l1.weight`, scopes `online/l1`
            online = torch.compile(raw, backend="eager")
        opt = torch.optim.SGD(online.parameters(), lr=0.1)
        models = {"online": online, "target": target}
        pair = pair_models(target, online, every=COPY_EVERY)
        rec = Recorder(
            logdir,
            every_n_steps=every,
            models=models,
            optimizers=[opt],
            pairs=[pair],
            rules=list(RULES),
        )

        def next_value(b):
            if cut == "no_grad":
                with torch.no_grad():
                    return target(b["s2"]).max(1).values
            if cut == "inference_mode":
                with torch.inference_mode():
                    q2 = target(b["s2"]).max(1).values
                return q2.clone()  # an inference tensor cannot enter autograd itself
            q2 = target(b["s2"]).max(1).values
            if cut == "detach":
                return q2.detach()
            if cut == "data":
                return q2.data
            return q2

        def td_loss(b):
            q = online(b["s"]).gather(1, b["a"][:, None]).squeeze(1)
            y = b["r"] + GAMMA * (1.0 - b["done"]) * next_value(b)
            return F.mse_loss(q, y)

        for step in range(steps):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [LossProbe("td", lambda: td_loss(b), [opt])],
                    models,
                    [kit.pair_probe(target, online, ("target", "online"))],
                ),
            )
            loss = td_loss(b)
            opt.zero_grad()
            rec.backward({"td": loss})
            opt.step()
            if step % COPY_EVERY == 0:
                target.load_state_dict(raw.state_dict())
            observer.after(step)
        rec.close()

    return train


def _double_dqn(leaky: bool):
    def train(logdir, observer):
        kit.seed(2)
        online, target = kit.mlp([5, A]), kit.mlp([5, A])
        kit.copy_weights(target, online)
        params = kit.parameters(online, target) if leaky else kit.parameters(online)
        opt = torch.optim.Adam(params, lr=0.01)
        models = {"online": online, "target": target}
        pair = pair_models(target, online, every=COPY_EVERY)
        rec = Recorder(
            logdir,
            every_n_steps=1,
            models=models,
            optimizers=[opt],
            pairs=[pair],
            rules=list(RULES),
        )

        def td_loss(b):
            a2 = online(b["s2"]).argmax(1)
            q2 = target(b["s2"]).gather(1, a2[:, None]).squeeze(1)
            if not leaky:
                q2 = q2.detach()
            y = b["r"] + GAMMA * (1.0 - b["done"]) * q2
            q = online(b["s"]).gather(1, b["a"][:, None]).squeeze(1)
            return F.mse_loss(q, y)

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [LossProbe("td", lambda: td_loss(b), [opt])],
                    models,
                    [kit.pair_probe(target, online, ("target", "online"))],
                ),
            )
            loss = td_loss(b)
            opt.zero_grad()
            rec.backward({"td": loss})
            opt.step()
            if step % COPY_EVERY == 0:
                target.load_state_dict(online.state_dict())
            observer.after(step)
        rec.close()

    return train


START_RULES = ("never(td, target/*)", "only(td, [online])")


def _start_point(leaky: bool):
    def train(logdir, observer):
        kit.seed(12)
        online, target = kit.mlp([4, A]), kit.mlp([4, A])
        kit.copy_weights(target, online)
        params = kit.parameters(online, target) if leaky else kit.parameters(online)
        opt = torch.optim.RMSprop(params, lr=0.01)
        models = {"online": online, "target": target}
        rec = Recorder(
            logdir, every_n_steps=1, models=models, optimizers=[opt], rules=list(START_RULES)
        )

        def start(b):
            """DQN 3.0: (q_all, its output gradient), or the leaky squared TD error."""
            q_all = online(b["s"])
            q2 = target(b["s2"]).max(1).values
            q = q_all.gather(1, b["a"][:, None]).squeeze(1)
            delta = (b["r"] + GAMMA * (1.0 - b["done"]) * q2 - q).clamp(-CLIP, CLIP)
            if leaky:
                return (delta**2).mean()
            targets = F.one_hot(b["a"], A) * delta.detach()[:, None]
            return q_all, -targets / kit.BATCH

        def named(b):
            out = start(b)
            return {"td": out if leaky else StartPoint(*out)}

        for step in range(4):
            b = kit.batch(step)
            observer.before(step, StepProbe([LossProbe("td", lambda: start(b), [opt])], models))
            losses = named(b)
            opt.zero_grad()
            rec.backward(losses)
            opt.step()
            observer.after(step)
        rec.close()

    return train


LSTM_RULES = ("never(td, target/*)", "blocked(td, target/*)")
SEQ = 4


class LstmValue(nn.Module):
    """An LSTM over a short sequence, then a linear value head."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(kit.OBS, 3, batch_first=True)
        self.value = nn.Linear(3, 1)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.value(out[:, -1])[:, 0]


def _ema_lstm():
    def train(logdir, observer):
        kit.seed(13)
        online, target = LstmValue(), LstmValue()
        kit.copy_weights(target, online)
        opt = torch.optim.Adam(online.parameters(), lr=0.01)
        models = {"online": online, "target": target}
        pair = pair_models(target, online, tau=TAU)
        rec = Recorder(
            logdir,
            every_n_steps=1,
            models=models,
            optimizers=[opt],
            pairs=[pair],
            rules=list(LSTM_RULES),
        )

        def seqs(b):
            s = b["s"][:, None, :].repeat(1, SEQ, 1)
            return s, s + 0.1 * b["s2"][:, None, :].repeat(1, SEQ, 1)

        def td_loss(b):
            s, s2 = seqs(b)
            with torch.no_grad():
                v2 = target(s2)
            return ((b["r"] + GAMMA * v2 - online(s)) ** 2).mean()

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                StepProbe(
                    [LossProbe("td", lambda: td_loss(b), [opt])],
                    models,
                    [kit.pair_probe(target, online, ("target", "online"))],
                ),
            )
            loss = td_loss(b)
            opt.zero_grad()
            rec.backward({"td": loss})
            opt.step()
            kit.polyak(target, online, TAU)
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "dqn",
        _dqn("detach"),
        RULES,
        causes=(DETACH,),
        note="DQN, the next value .detach()ed, hard copy every 2 steps",
    ),
    Shape(
        "dqn_leaky",
        _dqn(""),
        RULES,
        mutant_of="dqn",
        advice=("detach",),
        note="no .detach(): the TD error's gradient reaches the target network",
    ),
    Shape(
        "dqn_no_grad",
        _dqn("no_grad"),
        RULES,
        causes=(NO_GRAD,),
        note="DQN, the next value computed under torch.no_grad()",
    ),
    Shape(
        "dqn_inference_mode",
        _dqn("inference_mode"),
        RULES,
        causes=(("stop_gradient", "inference_mode"),),
        note="DQN, the next value computed under torch.inference_mode(), cloned out of it",
    ),
    Shape(
        "dqn_compiled",
        _dqn("detach", compiled=True),
        RULES,
        causes=(DETACH,),
        note="DQN, the online network torch.compile'd (its _orig_mod. wrapper is no scope)",
    ),
    Shape(
        "dqn_every_3",
        _dqn("detach", every=3, steps=7),
        RULES,
        causes=(DETACH,),
        steps=7,
        every_n_steps=3,
        note="DQN recorded every 3 steps (0, 3, 6) beside a hard copy every 2",
    ),
    Shape(
        "dqn_data",
        _dqn("data"),
        RULES,
        causes=(DATA,),
        note="DQN, the next value read through .data",
    ),
    Shape(
        "double_dqn",
        _double_dqn(False),
        RULES,
        causes=(DETACH,),
        note="Double DQN: argmax by online (no gradient), value by target, detached",
    ),
    Shape(
        "double_dqn_leaky",
        _double_dqn(True),
        RULES,
        mutant_of="double_dqn",
        note="the target's value not detached, the optimizer over both networks",
    ),
    Shape(
        "start_point",
        _start_point(False),
        START_RULES,
        note="seed 02: q_all started with the clipped TD error as output gradient (StartPoint)",
    ),
    Shape(
        "start_point_leaky",
        _start_point(True),
        START_RULES,
        mutant_of="start_point",
        note="squared TD error through the target network, optimizer over everything",
    ),
    Shape(
        "ema_lstm",
        _ema_lstm(),
        LSTM_RULES,
        causes=(NO_GRAD,),
        note="seed 03: LSTM value network, EMA target (hand-written Polyak) under torch.no_grad()",
    ),
]
