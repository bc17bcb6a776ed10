"""GPU hygiene by construction: an unrecorded step launches no kernel of the
recorder's, a recorded step reads the device once, and (on CUDA) every op the
recorder runs over the parameters stays on their device and syncs once.

The CPU tests count what the recorder asks of torch, which on CUDA would be
kernels and host reads: aten ops (a TorchDispatchMode) and the Tensor calls
that read a tensor's value on the host (a TorchFunctionMode; `.numpy()` and
`__array__` fail on a CUDA tensor, so a read goes through one of them or
through `.to("cpu")`, which on the CPU cannot be told from a `.to` of the
parameters' own device: the CUDA tests count those as aten copies to the host).
The CUDA tests run only where a GPU is (skipped here otherwise).
"""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode, resolve_name
from torch.utils._python_dispatch import TorchDispatchMode

from tb_gradscope.torch import Recorder, pair_models
from tb_gradscope.torch import _stats as stats
from tests.support.torch_loops import mlp

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

EVERY = 10
HOST_READS = {
    "Tensor.cpu",
    "Tensor.item",
    "Tensor.tolist",
    "Tensor.__bool__",
    "Tensor.__float__",
    "Tensor.__int__",
    "Tensor.__index__",
}


class AtenOps(TorchDispatchMode):
    """Every aten op dispatched while on, by name."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


class HostReads(TorchFunctionMode):
    """Every Tensor call that reads a tensor's value on the host, by name."""

    def __init__(self):
        super().__init__()
        self.reads: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        name = (resolve_name(func) or "").removeprefix("torch.")
        if name in HOST_READS:
            self.reads.append(name)
        return func(*args, **(kwargs or {}))


class Loop:
    """A DQN with a hard-copied target, stepped one step at a time, its
    gradients clipped in place; with a logdir, recorded every EVERY steps; with
    `scaled`, through a GradScaler (unscaled before the clipping)."""

    def __init__(self, logdir=None, scaled=False, device="cpu"):
        torch.manual_seed(0)
        self.device = device
        self.q = mlp(4, 16, 2).to(device)
        self.q_target = copy.deepcopy(self.q)
        self.opt = torch.optim.Adam(self.q.parameters(), 1e-3)
        self.scaler = torch.amp.GradScaler(torch.device(device).type) if scaled else None
        self.rec = None
        if logdir is not None:
            self.rec = Recorder(
                logdir,
                every_n_steps=EVERY,
                models={"online": self.q, "target": self.q_target},
                optimizers=[self.opt],
                pairs=[pair_models(self.q_target, self.q, every=100)],
                grad_scaler=self.scaler,
            )
        self.gen = torch.Generator(device).manual_seed(1)

    def step(self, mode=None) -> None:
        """One step; `mode` (a torch mode) is on over the step's backward and optimizer step."""
        s, s2 = torch.randn(2, 32, 4, generator=self.gen, device=self.device)
        a = torch.randint(0, 2, (32,), generator=self.gen, device=self.device)
        r = torch.randn(32, generator=self.gen, device=self.device)
        with torch.no_grad():
            y = r + 0.99 * self.q_target(s2).max(1).values
        loss = F.mse_loss(self.q(s).gather(1, a[:, None]).squeeze(1), y)
        if self.scaler is not None:
            loss = self.scaler.scale(loss)
        self.opt.zero_grad()
        with mode if mode is not None else _nothing():
            if self.rec is not None:
                self.rec.backward({"td": loss})
            else:
                loss.backward()
            if self.scaler is not None:
                self.scaler.unscale_(self.opt)
            torch.nn.utils.clip_grad_norm_(self.q.parameters(), 10.0)
            if self.scaler is not None:
                self.scaler.step(self.opt)
                self.scaler.update()
            else:
                self.opt.step()

    def run(self, steps: int) -> None:
        for _ in range(steps):
            self.step()


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return None


def _window(loop: Loop, mode_of, first: int, last: int) -> list:
    """What `mode_of()` saw over steps first..last (the loop stepped to `first`)."""
    loop.run(first)
    seen = []
    for _ in range(first, last + 1):
        mode = mode_of()
        loop.step(mode)
        seen.append(mode)
    return seen


@pytest.mark.parametrize("scaled", [False, True], ids=["fp32", "grad_scaler"])
def test_an_unrecorded_step_launches_nothing(scaled, tmp_path):
    """Steps 5 and 6 (no record due, no analysis pending) run the very aten
    ops the loop runs without a recorder."""
    plain = _window(Loop(None, scaled), AtenOps, 5, 6)
    recorded = _window(Loop(tmp_path, scaled), AtenOps, 5, 6)
    for with_rec, without in zip(recorded, plain):
        assert with_rec.ops == without.ops and without.ops


@pytest.mark.parametrize("scaled", [False, True], ids=["fp32", "grad_scaler"])
def test_a_recorded_step_reads_the_device_once(scaled, tmp_path, monkeypatch):
    """Recorded step 10 (its backward, its optimizer step, and the next
    backward, where it ends and is written), as on a GPU: one host read more
    than the plain loop's (the GradScaler's own `.item()` per step is in both)."""
    monkeypatch.setattr(stats, "reads_cheaply", lambda device: False)  # a GPU's way
    plain = _window(Loop(None, scaled), HostReads, EVERY, EVERY + 1)
    recorded = _window(Loop(tmp_path, scaled), HostReads, EVERY, EVERY + 1)
    extra = [
        sorted(set(r.reads) ^ set(p.reads)) or len(r.reads) - len(p.reads)
        for r, p in zip(recorded, plain)
    ]
    assert sum(len(r.reads) for r in recorded) - sum(len(p.reads) for p in plain) == 1, extra
    assert recorded[1].reads.count("Tensor.cpu") == 1  # `stats.pack`, as step 10 ends


def test_on_a_cpu_a_recorded_step_also_reads_whether_its_gradients_are_finite(tmp_path):
    """A CPU's way: one more read, at the backward, where reading waits for nothing."""
    plain = _window(Loop(None), HostReads, EVERY, EVERY + 1)
    recorded = _window(Loop(tmp_path), HostReads, EVERY, EVERY + 1)
    assert [len(r.reads) - len(p.reads) for r, p in zip(recorded, plain)] == [1, 1]
    assert recorded[0].reads.count("Tensor.__bool__") == plain[0].reads.count("Tensor.__bool__") + 1
    assert recorded[1].reads.count("Tensor.cpu") == 1


# ----- CUDA only ---------------------------------------------------------------


class DeviceOps(TorchDispatchMode):
    """Aten ops that read a CUDA tensor into host memory: a copy to a host
    tensor, or `_local_scalar_dense` (`.item()`, `bool()`, `float()`)."""

    def __init__(self):
        super().__init__()
        self.to_host: list[str] = []
        self.ops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        ins = [t for t in _tensors((args, kwargs)) if t.device.type == "cuda"]
        outs = [t for t in _tensors(out) if t.device.type == "cpu"]
        if ins and (outs or "_local_scalar_dense" in str(func)):
            self.to_host.append(str(func))
        self.ops += 1
        return out


def _tensors(tree):
    if isinstance(tree, torch.Tensor):
        yield tree
    elif isinstance(tree, (tuple, list)):
        for item in tree:
            yield from _tensors(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _tensors(item)


@cuda_only
@pytest.mark.parametrize("scaled", [False, True], ids=["fp32", "grad_scaler"])
def test_cuda_a_recorded_step_copies_to_the_host_once(scaled, tmp_path):
    plain = _window(Loop(None, scaled, "cuda"), DeviceOps, EVERY, EVERY + 1)
    recorded = _window(Loop(tmp_path, scaled, "cuda"), DeviceOps, EVERY, EVERY + 1)
    got = [op for mode in recorded for op in mode.to_host]
    want = [op for mode in plain for op in mode.to_host]
    assert len(got) - len(want) == 1, (got, want)


@cuda_only
def test_cuda_an_unrecorded_step_launches_nothing(tmp_path):
    plain = _window(Loop(None, False, "cuda"), AtenOps, 5, 6)
    recorded = _window(Loop(tmp_path, False, "cuda"), AtenOps, 5, 6)
    assert [m.ops for m in recorded] == [m.ops for m in plain]


@cuda_only
def test_cuda_a_recorded_step_synchronises_once(tmp_path):
    """torch's sync debug mode warns at every call that waits for the GPU."""

    def syncs(loop: Loop) -> int:
        loop.run(EVERY)
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                loop.step()
                loop.step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        return sum("synchroniz" in str(w.message) for w in seen)

    assert syncs(Loop(tmp_path, False, "cuda")) - syncs(Loop(None, False, "cuda")) == 1


@cuda_only
def test_cuda_amp_fp16_norms_are_unscaled(tmp_path):
    """fp16 autocast on the GPU with a GradScaler: the recorded norm of a step
    is the unscaled gradients' (as `.grad` holds them after `unscale_`)."""
    from tb_gradscope.read.logdir import load_logdir

    torch.manual_seed(0)
    net = mlp(8, 32, 1).cuda()
    opt = torch.optim.SGD(net.parameters(), 1e-2)
    scaler = torch.amp.GradScaler("cuda")
    with Recorder(tmp_path, every_n_steps=1, models={"net": net}, grad_scaler=scaler) as rec:
        x = torch.randn(64, 8, device="cuda")
        with torch.autocast("cuda", dtype=torch.float16):
            loss = net(x).float().square().mean()
        opt.zero_grad()
        rec.backward({"mse": scaler.scale(loss)})
        scaler.unscale_(opt)
        norm = torch.cat([p.grad.reshape(-1) for p in net.parameters()]).norm().item()
        scaler.step(opt)
        scaler.update()
    (run,) = load_logdir(str(tmp_path))
    assert run.grads[0]["mse"].row("net")["l2"] == pytest.approx(norm, rel=1e-5)


def test_host_index_tensors_stay_where_they_are_on_the_cpu():
    index = torch.as_tensor([0, 2, 5])
    assert stats.to_device(index, torch.device("cpu")) is index


@cuda_only
def test_cuda_host_index_tensors_reach_the_gpu_without_a_sync():
    index = torch.as_tensor([0, 2, 5])
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            on_gpu = stats.to_device(index, torch.device("cuda"))
        finally:
            torch.cuda.set_sync_debug_mode("default")
    assert on_gpu.device.type == "cuda" and on_gpu.tolist() == [0, 2, 5]
    assert not [w for w in seen if "synchroniz" in str(w.message)]
