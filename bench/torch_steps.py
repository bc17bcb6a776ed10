"""The PyTorch training steps `bench_torch` times, and the ways each is observed.

Not a benchmark itself (run_all runs only bench_*.py). A `Model` is one
training step over fixed batches (`train_step(variant)`); a `Variant` is how
that step's gradients are observed: not at all (`Plain`), by the hand-written
logger PyTorch users write (`HandScalars`: per-parameter `p.grad.norm()` and
a global norm through `SummaryWriter.add_scalar`), by `wandb.watch`-style
gradient histograms (`HandHistograms`: `SummaryWriter.add_histogram` per
parameter), or by tb_gradscope in the README configuration (`Ours`: the
models, a pair per target network and a rule). Every variant of one model
starts from the same weights (`make(name, device)` reseeds).

`torch.utils.tensorboard` imports tensorflow whenever it is installed, and a
process that has imported tensorflow segfaults when torch later loads triton:
`torch._dynamo` is imported first.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import dataclasses
from collections.abc import Callable, Sequence

import torch
import torch._dynamo  # noqa: F401  (before torch.utils.tensorboard: see the docstring)
import torch.nn.functional as F
from torch import nn
from torch.utils.tensorboard import SummaryWriter

GAMMA = 0.99
SYNC_EVERY = 500
TAU = 0.005

# ----- variants: what happens at each backward and at the end of each step

Losses = dict[str, torch.Tensor]
NamedParams = Sequence[tuple[str, torch.Tensor]]


class Plain:
    """No observation: the sum of the losses' backward, as users write it."""

    def __init__(self):
        self.steps = 0

    def backward(self, losses: Losses, params: NamedParams) -> None:
        sum(losses.values()).backward()

    def scope(self) -> contextlib.AbstractContextManager:
        """What wraps one training step (tb_gradscope's `rec.step()` for two optimizers)."""
        return contextlib.nullcontext()

    def end_step(self) -> None:
        self.steps += 1

    def end_run(self) -> None:
        """Finishes what the run left to a background thread, inside the run's time."""

    def close(self) -> None:
        pass


class HandScalars(Plain):
    """The logger PyTorch users write: every `every` steps, after the backward,
    `add_scalar` of each parameter's gradient L2 norm and of the global norm."""

    def __init__(self, logdir: str, every: int):
        super().__init__()
        self.writer = SummaryWriter(logdir)
        self.every = every

    def backward(self, losses: Losses, params: NamedParams) -> None:
        super().backward(losses, params)
        if self.steps % self.every == 0:
            norms = []
            for name, p in params:
                norm = p.grad.norm()
                self.writer.add_scalar(f"grad_norm/{name}", norm, self.steps)
                norms.append(norm)
            self.writer.add_scalar("grad_norm/global", torch.stack(norms).norm(), self.steps)

    def end_run(self) -> None:
        # SummaryWriter encodes and writes on a thread of its own: flushed here,
        # that work counts in this variant's process CPU time, not the next one's.
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class HandHistograms(HandScalars):
    """`wandb.watch(model, log="gradients")` in TensorBoard terms: every `every`
    steps, `add_histogram` of each parameter's gradient."""

    def backward(self, losses: Losses, params: NamedParams) -> None:
        Plain.backward(self, losses, params)
        if self.steps % self.every == 0:
            for name, p in params:
                self.writer.add_histogram(f"grad/{name}", p.grad, self.steps)


class Ours(Plain):
    """tb_gradscope in the README configuration: the model's networks, a pair per
    target network, its rule; `rec.backward` in place of `.backward()`."""

    def __init__(self, logdir: str, every: int, model: Model):
        from tb_gradscope.torch import Recorder, pair_models

        super().__init__()
        self.rec = Recorder(
            logdir,
            every_n_steps=every,
            models=model.models,
            optimizers=model.optimizers,
            pairs=[pair_models(t, o, **how) for t, o, how in model.pairs],
            rules=model.rules,
        )

    def backward(self, losses: Losses, params: NamedParams) -> None:
        self.rec.backward(losses)

    def scope(self) -> contextlib.AbstractContextManager:
        return self.rec.step()

    def close(self) -> None:
        self.rec.close()


class DevicePasses(Plain):
    """The device passes a recorded step of ours makes, and nothing else: per
    backward the gradients' norms, max |g| and non-zeros; per step the
    parameters' snapshot, the update, each pair's four differences (target -
    online, target - online before, online - target before, target - target at
    the last record), their norms, one transfer to the host. No analysis,
    tables, rules or writes: not a logger, the floor under any recorder that
    writes these records in float32 with grouped kernels."""

    def __init__(self, model: Model):
        super().__init__()
        self.params = [p for m in model.models.values() for p in m.parameters()]
        index = {id(p): k for k, p in enumerate(self.params)}
        self.before = [torch.empty_like(p) for p in self.params]
        self.pairs = [(list(t.parameters()), list(o.parameters())) for t, o, _ in model.pairs]
        self.pair_before = [
            ([index[id(x)] for x in t], [index[id(x)] for x in o]) for t, o in self.pairs
        ]
        self.at_record = [[x.detach().clone() for x in t] for t, _ in self.pairs]
        self.figures: list[torch.Tensor] = []
        self.moved = None  # the last step's figures, on the host
        self.in_step = self.in_scope = False

    @torch.no_grad()
    def _begin(self) -> None:
        if self.in_step:
            self._end()
        torch._foreach_copy_(self.before, self.params)
        self.in_step = True

    @torch.no_grad()
    def _end(self) -> None:
        norms_of = [*torch._foreach_sub(self.params, self.before), *self.params]
        for (t, o), (t_at, o_at), tr in zip(self.pairs, self.pair_before, self.at_record):
            tp, op = [self.before[k] for k in t_at], [self.before[k] for k in o_at]
            for a, b in ((t, o), (t, op), (o, tp), (t, tr)):
                norms_of += torch._foreach_sub(a, b)
            torch._foreach_copy_(tr, t)
        self.figures.append(torch.stack(torch._foreach_norm(norms_of)))
        self.moved = torch.cat([f.double() for f in self.figures]).cpu().numpy()
        self.figures, self.in_step = [], False

    def backward(self, losses: Losses, params: NamedParams) -> None:
        if not self.in_scope:
            self._begin()
        super().backward(losses, params)
        with torch.no_grad():
            grads = [p.grad for _, p in params if p.grad is not None]
            magnitude = torch._foreach_abs(grads)
            maxima = torch.stack(torch._foreach_max(magnitude))
            torch._foreach_sign_(magnitude)
            self.figures += [torch.stack(torch._foreach_norm(grads)), maxima]
            self.figures.append(torch.stack(torch._foreach_norm(magnitude)))

    @contextlib.contextmanager
    def scope(self):
        self._begin()
        self.in_scope = True
        try:
            yield
        finally:
            self.in_scope = False

    def end_run(self) -> None:
        if self.in_step:
            self._end()


# ----- models: one training step over fixed batches


def mlp(sizes: Sequence[int]) -> nn.Sequential:
    """Linear layers l1, l2, ... with ReLU between them."""
    layers: list[tuple[str, nn.Module]] = []
    for i, (a, b) in enumerate(zip(sizes, sizes[1:]), start=1):
        if i > 1:
            layers.append((f"relu{i - 1}", nn.ReLU()))
        layers.append((f"l{i}", nn.Linear(a, b)))
    return nn.Sequential(collections.OrderedDict(layers))


@dataclasses.dataclass
class Model:
    """A training step and what `Ours` needs to record it.

    `pairs` are (target, online, pair_models keyword) triples; `step` runs one
    training step observed by a variant and returns its loss.
    """

    name: str
    models: dict[str, nn.Module]
    optimizers: list[torch.optim.Optimizer]
    pairs: list[tuple[nn.Module, nn.Module, dict]]
    rules: list[str]
    step: Callable[[Plain], torch.Tensor]

    def train_step(self, variant: Plain) -> torch.Tensor:
        loss = self.step(variant)
        variant.end_step()
        return loss


def _named(module: nn.Module, root: str) -> list[tuple[str, torch.Tensor]]:
    return [(f"{root}/{n}", p) for n, p in module.named_parameters()]


def dqn(units: int, device: str, batch: int = 32) -> Model:
    """A CartPole-sized DQN (4 -> units -> units -> 2), target `.detach()`ed by
    `no_grad`, Adam, a hard copy every SYNC_EVERY steps."""
    online = mlp([4, units, units, 2]).to(device)
    target = copy.deepcopy(online)
    opt = torch.optim.Adam(online.parameters(), 1e-3)
    g = torch.Generator().manual_seed(1)
    s, s2 = torch.randn(2, batch, 4, generator=g).to(device)
    a = torch.randint(0, 2, (batch,), generator=g).to(device)
    r = torch.randn(batch, generator=g).to(device)
    params = _named(online, "online")
    count = [0]

    def step(v: Plain) -> torch.Tensor:
        q_sa = online(s).gather(1, a[:, None]).squeeze(1)
        with torch.no_grad():
            y = r + GAMMA * target(s2).max(dim=1).values
        loss = F.mse_loss(q_sa, y)
        opt.zero_grad()
        v.backward({"td": loss}, params)
        opt.step()
        count[0] += 1
        if count[0] % SYNC_EVERY == 0:
            target.load_state_dict(online.state_dict())
        return loss

    return Model(
        f"dqn{units}",
        {"online": online, "target": target},
        [opt],
        [(target, online, {"every": SYNC_EVERY})],
        ["never(td, target/*)"],
        step,
    )


def ddpg(units: int, device: str, batch: int = 64, state: int = 8, action: int = 2) -> Model:
    """A DDPG step: critic TD loss then actor loss, two Adams, Polyak targets,
    the whole step in the variant's scope (`rec.step()` for ours)."""
    actor = mlp([state, units, units, action]).to(device)
    critic = mlp([state + action, units, units, 1]).to(device)
    actor_t, critic_t = copy.deepcopy(actor), copy.deepcopy(critic)
    actor_opt = torch.optim.Adam(actor.parameters(), 1e-3)
    critic_opt = torch.optim.Adam(critic.parameters(), 1e-3)
    g = torch.Generator().manual_seed(2)
    s, s2 = torch.randn(2, batch, state, generator=g).to(device)
    a = torch.rand(batch, action, generator=g).to(device) * 2 - 1
    r = torch.randn(batch, generator=g).to(device)
    actor_params, critic_params = _named(actor, "actor"), _named(critic, "critic")

    def q(net: nn.Module, s: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return net(torch.cat([s, a], dim=1)).squeeze(1)

    def step(v: Plain) -> torch.Tensor:
        with v.scope():
            with torch.no_grad():
                y = r + GAMMA * q(critic_t, s2, torch.tanh(actor_t(s2)))
            critic_loss = F.mse_loss(q(critic, s, a), y)
            critic_opt.zero_grad()
            v.backward({"critic": critic_loss}, critic_params)
            critic_opt.step()
            actor_loss = -q(critic, s, torch.tanh(actor(s))).mean()
            actor_opt.zero_grad()
            v.backward({"actor": actor_loss}, actor_params)
            actor_opt.step()
        with torch.no_grad():
            for t, o in ((actor_t, actor), (critic_t, critic)):
                torch._foreach_lerp_(list(t.parameters()), list(o.parameters()), TAU)
        return critic_loss

    return Model(
        f"ddpg{units}",
        {"actor": actor, "critic": critic, "actor_target": actor_t, "critic_target": critic_t},
        [actor_opt, critic_opt],
        [(actor_t, actor, {"tau": TAU}), (critic_t, critic, {"tau": TAU})],
        ["never(actor, critic/*)"],
        step,
    )


def mlp1m(device: str, batch: int = 256) -> Model:
    """A ~1M-parameter classifier (512 -> 1024 -> 512 -> 10), cross-entropy, Adam."""
    net = mlp([512, 1024, 512, 10]).to(device)
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(batch, 512, generator=g).to(device)
    y = torch.randint(0, 10, (batch,), generator=g).to(device)
    params = _named(net, "mlp")

    def step(v: Plain) -> torch.Tensor:
        loss = F.cross_entropy(net(x), y)
        opt.zero_grad()
        v.backward({"ce": loss}, params)
        opt.step()
        return loss

    return Model("mlp1m", {"mlp": net}, [opt], [], ["only(ce, mlp/*)"], step)


BUILDERS: dict[str, Callable[[str], Model]] = {
    "dqn32": lambda device: dqn(32, device),
    "dqn256": lambda device: dqn(256, device),
    "ddpg": lambda device: ddpg(64, device),
    "mlp1m": mlp1m,
}


def make(name: str, device: str) -> Model:
    """A fresh `name` model on `device`, its weights the same every call."""
    torch.manual_seed(0)
    return BUILDERS[name](device)


def parameter_count(model: Model) -> int:
    return sum(p.numel() for m in model.models.values() for p in m.parameters())
