"""A tiny two-head regression trained under DistributedDataParallel, for the DDP tests.

`train` is one loop for every variant: under DDP (each rank takes its half of
every batch) or in one process over the whole batch (the reference), with or
without a Recorder, with one loss or two in one backward. Run as a script
(`python -m tests.support.torch_ddp_steps OUT`) with RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT set, each process joins a gloo group, trains every
scenario of `SCENARIOS` into OUT/<scenario> (the same logdir on every rank, as
a user's script does) and saves its final parameters to
OUT/<scenario>.rank<r>.pt (its pid and the GradscopeWarnings it saw to
OUT/<scenario>.rank<r>.json). Data and init come from fixed seeds, so every rank
and the reference start equal and see the same batches.
"""

from __future__ import annotations

import collections
import contextlib
import datetime
import json
import os
import sys
import warnings
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from tb_gradscope.torch import GradscopeWarning, Recorder

STEPS = 5
EVERY = 2
BATCH = 16  # the whole batch; each of two ranks takes half


class TwoHeads(nn.Module):
    """A shared trunk and two heads: `fit` reads both heads, `a` and `b` one each."""

    def __init__(self):
        super().__init__()
        self.trunk = nn.Linear(4, 8)
        self.heads = nn.ModuleDict(collections.OrderedDict(a=nn.Linear(8, 1), b=nn.Linear(8, 1)))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.trunk(x))
        return self.heads["a"](h).squeeze(1), self.heads["b"](h).squeeze(1)


def batches(steps: int = STEPS) -> list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The whole batches, the same in every process."""
    gen = torch.Generator().manual_seed(1)
    return [
        (
            torch.randn(BATCH, 4, generator=gen),
            torch.randn(BATCH, generator=gen),
            torch.randn(BATCH, generator=gen),
        )
        for _ in range(steps)
    ]


def losses_of(
    net: nn.Module, x: torch.Tensor, ya: torch.Tensor, yb: torch.Tensor, two: bool
) -> dict[str, torch.Tensor]:
    pa, pb = net(x)
    la, lb = F.mse_loss(pa, ya), F.mse_loss(pb, yb)
    return {"a": la, "b": lb} if two else {"fit": la + lb}


def train(
    logdir: Any = None,
    *,
    ddp: dict | None = None,
    two: bool = False,
    rank: int = 0,
    world: int = 1,
    fail_at: int | None = None,
    observed: bool = False,
    kept_grads: bool = False,
    probe: Any = None,
) -> list[torch.Tensor]:
    """Trains `TwoHeads` for STEPS steps and returns its final parameters.

    ddp: DistributedDataParallel's keyword arguments (None: no DDP; rank and
    world then pick this process's share of each batch). logdir: record with a
    Recorder there. fail_at: the recorder's gradient tables raise from that
    step on (a recorder that fails on this rank only). observed: the loop's own
    backward between `rec.observe_backward` and `rec.backward_observed` (as the
    callbacks run it). kept_grads: `zero_grad(set_to_none=False)`, so `.grad`
    holds a tensor before each backward. probe(step, net, batch):
    called before each step's forward (the tests' hand-made norms)."""
    torch.manual_seed(0)
    net = TwoHeads()
    model: nn.Module = net if ddp is None else nn.parallel.DistributedDataParallel(net, **ddp)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = None
    if logdir is not None:
        rec = Recorder(logdir, every_n_steps=EVERY, models={"net": model}, optimizers=[opt])
        if fail_at is not None:
            _fail_from(rec, fail_at)
    share = BATCH // world
    for step, (x, ya, yb) in enumerate(batches()):
        part = slice(rank * share, (rank + 1) * share)
        if probe is not None:
            probe(step, net, (x, ya, yb))
        losses = losses_of(model, x[part], ya[part], yb[part], two)
        opt.zero_grad(set_to_none=not kept_grads)
        if rec is None:
            sum(losses.values()).backward()
        elif observed:
            rec.observe_backward(losses)
            sum(losses.values()).backward()
            rec.backward_observed()
        else:
            rec.backward(losses)
        opt.step()
    if rec is not None:
        rec.close()
    return [p.detach().clone() for p in net.parameters()]


def micro_batches(batch: tuple[torch.Tensor, ...]) -> list[list[tuple[torch.Tensor, ...]]]:
    """[rank][k]: rank r's half of the batch as two micro-batches."""
    q = BATCH // 4
    return [
        [tuple(t[(2 * r + k) * q : (2 * r + k + 1) * q] for t in batch) for k in (0, 1)]
        for r in (0, 1)
    ]


def fit(net: nn.Module, micro: tuple[torch.Tensor, ...]) -> torch.Tensor:
    return losses_of(net, *micro, two=False)["fit"]


def accumulate(
    logdir: Any = None, *, rank: int = 0, distributed: bool = False, probe: Any = None
) -> list[torch.Tensor]:
    """Gradient accumulation: each of two ranks takes its half of every batch in
    two micro-batches, the first under DDP's `no_sync()`, losses `m1` and `m2`
    in one `rec.step()`. In one process (distributed=False), the same update:
    one backward of the four micro-batches' losses, summed, over two."""
    torch.manual_seed(0)
    net = TwoHeads()
    model: nn.Module = nn.parallel.DistributedDataParallel(net) if distributed else net
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rec = None
    if logdir is not None:
        rec = Recorder(logdir, every_n_steps=EVERY, models={"net": model}, optimizers=[opt])
    for step, batch in enumerate(batches()):
        if probe is not None:
            probe(step, net, batch)
        micro = micro_batches(batch)
        opt.zero_grad()
        with rec.step() if rec is not None else contextlib.nullcontext():
            if distributed:
                with model.no_sync():
                    _backward(rec, {"m1": fit(model, micro[rank][0])})
                _backward(rec, {"m2": fit(model, micro[rank][1])})
            else:
                _backward(rec, {"all": sum(fit(model, m) for half in micro for m in half) / 2})
        opt.step()
    if rec is not None:
        rec.close()
    return [p.detach().clone() for p in net.parameters()]


def _backward(rec: Recorder | None, losses: dict[str, torch.Tensor]) -> None:
    if rec is None:
        sum(losses.values()).backward()
    else:
        rec.backward(losses)


def _fail_from(rec: Recorder, step: int) -> None:
    """From `step` on, the recorder's per-loss tables raise inside the recorder."""
    work = rec._work
    tables = work._tables

    def failing(w, *args):
        if w.step >= step:
            raise RuntimeError("injected recorder failure")
        return tables(w, *args)

    work._tables = failing


# scenario -> train()'s keyword arguments (logdir aside).
SCENARIOS: dict[str, dict] = {
    "plain": {"ddp": {}, "record": False},
    "one_loss": {"ddp": {}},
    "observed": {"ddp": {}, "observed": True},
    "kept_grads": {"ddp": {}, "kept_grads": True},
    "two_losses": {"ddp": {}, "two": True},
    "fails_on_rank0": {"ddp": {}, "fail_at": 2},
    "plain_static": {"ddp": {"static_graph": True}, "two": True, "record": False},
    "static_graph": {"ddp": {"static_graph": True}, "two": True},
    "static_one": {"ddp": {"static_graph": True}},
    "plain_accumulate": {"accumulate": True, "record": False},
    "accumulate": {"accumulate": True},
    "plain_unused": {"ddp": {"find_unused_parameters": True}, "two": True, "record": False},
    "find_unused": {"ddp": {"find_unused_parameters": True}, "two": True},
}


def main(out: str) -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    try:
        for name, kw in SCENARIOS.items():
            kw = dict(kw)
            fail_at = kw.pop("fail_at", None)
            logdir = os.path.join(out, name) if kw.pop("record", True) else None
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", GradscopeWarning)
                if kw.pop("accumulate", False):
                    params = accumulate(logdir, rank=rank, distributed=True)
                else:
                    params = train(
                        logdir, rank=rank, world=world, fail_at=fail_at if rank == 0 else None, **kw
                    )
            torch.save(params, os.path.join(out, f"{name}.rank{rank}.pt"))
            said = [str(w.message) for w in caught if issubclass(w.category, GradscopeWarning)]
            with open(os.path.join(out, f"{name}.rank{rank}.json"), "w") as f:
                json.dump({"pid": os.getpid(), "warnings": said}, f)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
