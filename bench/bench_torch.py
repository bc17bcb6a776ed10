"""PyTorch recording overhead per training step: tb_gradscope.torch against the plain
step, the hand-written gradient logger and `wandb.watch`-style histograms.

Models (bench.torch_steps): a CartPole DQN at 32 and 256 units (online +
target, hard copy), a DDPG step (actor, critic, two Adams, Polyak targets,
64 units) and a ~1M-parameter MLP classifier. Variants of each, side by side
in one process, every variant training its own copy from the same weights,
run round-robin with the order rotated every round (bench.harness); torch on
one thread (`torch.set_num_threads(1)`):
  - `plain`: `sum(losses).backward()`, nothing observed; `plain_again`: a
    second plain copy, an A/A control whose distance from 1 is the resolution;
  - `hand10` / `hand1`: what PyTorch users write, every 10 steps / every step:
    after the backward, `SummaryWriter.add_scalar` of each parameter's
    `p.grad.norm()` and of the global norm;
  - `hist10`: `wandb.watch`-style, `add_histogram` of each parameter's gradient
    every 10 steps;
  - `ours10` / `ours1`: tb_gradscope in the README configuration (models, a pair
    per target network, a rule) at every_n_steps=10 / 1;
  - `idle`: ours at every_n_steps=10**9 after its first (recorded) step: every
    timed step has nothing due;
  - `passes1`: the device passes ours makes at a recorded step and nothing
    else, every step (torch_steps.DevicePasses): the floor under any recorder
    writing the same records, against which ours1's host side is read.
Ratios are medians over rounds of the ratio of that round's two runs, in
the main thread's CPU time on CPU (other processes on a busy machine inflate
wall time, not it) and in wall time on CUDA (synchronised at the end of a
run). Not the process's CPU time: once `torch.utils.tensorboard` has written
(it loads tensorflow), other threads of the process burn CPU while later
variants run (the nothing-due step read 1.59x the plain one in process time,
0.99-1.01x in its thread's); a SummaryWriter's own writer thread is then not
counted either, which favours the hand loggers, not tb_gradscope (it writes
on the main thread). Each run flushes its writer before it ends.

    python -m bench.bench_torch --quick           # < 60 s, on the CPU
    python -m bench.bench_torch [--device cuda]   # full; --device cuda needs a GPU

Every run prints the device it measured (`torch_device`) and its name
(`torch_device_name`: the GPU's, or the CPU's model), so a figure quoted in
docs/PERFORMANCE.md says where it came from; the headline names are the
same on every device.

Headlines, last: torch_every_step_vs_hand (worst ours1/hand1 over DQN 32/256
and DDPG), torch_nothing_due_ratio (worst idle/plain over the same),
torch_overhead_vs_hand_logger (worst ours10/hand10 over the same).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # torch.utils.tensorboard imports tensorflow

import torch  # noqa: E402

from bench import torch_steps  # noqa: E402  (imports torch._dynamo before tensorboard's tensorflow)
from bench.harness import median_ratio, report, rotated_samples  # noqa: E402

HEADLINE_MODELS = ("dqn32", "dqn256", "ddpg")
EVERY = 10
IDLE_EVERY = 10**9
# (rounds, steps per run) by mode and model; steps per run a multiple of EVERY.
PLAN = {
    "quick": {"dqn32": (11, 20), "dqn256": (11, 20), "ddpg": (11, 20), "mlp1m": (3, 10)},
    "full": {"dqn32": (41, 50), "dqn256": (41, 50), "ddpg": (41, 50), "mlp1m": (21, 20)},
}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run (< 60 s)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument("--only", nargs="+", choices=list(PLAN["full"]), help="these models only")
    return parser.parse_args()


def device_name(device: str) -> str:
    """The GPU's name (`torch.cuda.get_device_name`), or the CPU's model."""
    if device.startswith("cuda"):
        return torch.cuda.get_device_name(torch.device(device))
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def variants(name: str, logdir: str) -> dict[str, Callable]:
    """{label: make(model) -> variant}, in timing order."""

    def at(label: str) -> str:
        return os.path.join(logdir, f"{name}_{label}")

    out = {
        "plain": lambda m: torch_steps.Plain(),
        "plain_again": lambda m: torch_steps.Plain(),
        "hand10": lambda m: torch_steps.HandScalars(at("hand10"), EVERY),
        "hist10": lambda m: torch_steps.HandHistograms(at("hist10"), EVERY),
        "ours10": lambda m: torch_steps.Ours(at("ours10"), EVERY, m),
        "idle": lambda m: torch_steps.Ours(at("idle"), IDLE_EVERY, m),
    }
    if name != "mlp1m":  # every step: the small models users log every step
        out["hand1"] = lambda m: torch_steps.HandScalars(at("hand1"), 1)
        out["ours1"] = lambda m: torch_steps.Ours(at("ours1"), 1, m)
        out["passes1"] = lambda m: torch_steps.DevicePasses(m)
    return out


def run_of(model, variant, steps: int, device: str):
    """A run of `steps` training steps, synchronised on the last loss."""

    def run() -> None:
        for _ in range(steps):
            loss = model.train_step(variant)
        variant.end_run()
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        loss.item()

    return run


def measure(name: str, device: str, rounds: int, steps: int, logdir: str) -> dict[str, float]:
    """Reports one model's figures; returns its ratios by label.

    Each variant is built and warmed up (its first run: ours records and
    analyses step 0) before the next is built: a recorder watches the torch
    calls of the whole process from its construction to its first backward.
    """
    built, runs = {}, {}
    for label, make_variant in variants(name, logdir).items():
        model = torch_steps.make(name, device)
        built[label] = (model, make_variant(model))
        runs[label] = run_of(model, built[label][1], steps, device)
        start = time.perf_counter()
        runs[label]()
        report(f"torch_{name}_{label}_warmup_s", time.perf_counter() - start)
    wall, cpu = rotated_samples(runs, rounds, cpu_clock=time.thread_time)
    for _, variant in built.values():
        variant.close()
    timed = wall if device.startswith("cuda") else cpu
    report(f"torch_{name}_params", torch_steps.parameter_count(built["plain"][0]))
    report(f"torch_{name}_plain_ms_per_step", 1000 * statistics.median(timed["plain"]) / steps)
    ratios = {}
    for label in runs:
        if label != "plain":
            ratios[label] = median_ratio(timed, label, "plain")
            report(f"torch_{name}_{label}_vs_plain", ratios[label])
    ratios["ours10_vs_hand10"] = median_ratio(timed, "ours10", "hand10")
    report(f"torch_{name}_ours10_vs_hand10", ratios["ours10_vs_hand10"])
    if "ours1" in runs:
        ratios["ours1_vs_hand1"] = median_ratio(timed, "ours1", "hand1")
        report(f"torch_{name}_ours1_vs_hand1", ratios["ours1_vs_hand1"])
        report(f"torch_{name}_passes1_vs_hand1", median_ratio(timed, "passes1", "hand1"))
    return ratios


def headlines(ratios: dict[str, dict[str, float]]) -> dict[str, float]:
    """The three headline figures: worst over the DQN 32/256 and DDPG models measured."""
    models = [m for m in HEADLINE_MODELS if m in ratios]
    if not models:
        return {}
    return {
        "torch_every_step_vs_hand": max(ratios[m]["ours1_vs_hand1"] for m in models),
        "torch_nothing_due_ratio": max(ratios[m]["idle"] for m in models),
        "torch_overhead_vs_hand_logger": max(ratios[m]["ours10_vs_hand10"] for m in models),
    }


def main() -> int:
    args = parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print(f"--device {args.device}: CUDA is not available here", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    plan = PLAN["quick" if args.quick else "full"]
    names = args.only or list(plan)
    report("torch_version", torch.__version__)
    report("torch_device", args.device)
    report("torch_device_name", device_name(args.device))
    ratios = {}
    with tempfile.TemporaryDirectory() as logdir:
        for name in names:
            rounds, steps = plan[name]
            ratios[name] = measure(name, args.device, rounds, steps, logdir)
    worst = headlines(ratios)
    if worst:  # the headline last, each name spelt out (docs/PERFORMANCE.md quotes them)
        report("torch_every_step_vs_hand", worst["torch_every_step_vs_hand"])
        report("torch_nothing_due_ratio", worst["torch_nothing_due_ratio"])
        report("torch_overhead_vs_hand_logger", worst["torch_overhead_vs_hand_logger"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
