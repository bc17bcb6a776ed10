"""What a demo is: a named scenario, its twins, the rules its leaky twin breaks.

Every demo module (`dqn.py`, `multihead.py`, ...) defines `DEMO = Demo(...)`.
This module imports neither tensorflow nor torch, so the CLI can list demos
and print --help quickly; `load_demo` imports a demo module (and its
framework) on demand.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
from collections.abc import Callable, Mapping, Sequence

CLEAN = "clean"
LEAKY = "leaky"

# Demo order on the command line and on disk. dqn_tf1 needs the TF1
# integration (tb_gradscope.integrations.tf1).
TF_DEMO_NAMES = ("dqn", "dqn_tf1", "multihead", "dqn3_grad_start", "ema_lstm", "actor_critic")
# The same seed scenarios in PyTorch (tb_gradscope.torch), and DDPG.
TORCH_DEMO_NAMES = (
    "torch_dqn",
    "torch_multihead",
    "torch_dqn3_grad_start",
    "torch_ddpg",
    "torch_ema_lstm",
)
DEMO_NAMES = TF_DEMO_NAMES + TORCH_DEMO_NAMES

DEFAULT_SEED = 0
DEFAULT_RECORD_EVERY = 5


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """One training run: a twin of a demo, written to `run_dir`.

    Attributes:
      twin: CLEAN, LEAKY, or another twin the demo declares.
      run_dir: the TensorBoard run directory (LOGDIR/<demo>/<twin>).
      steps: optimizer steps to train.
      seed: seeds numpy, Python and TensorFlow for the run.
      env: environment choice for RL demos ("auto", "builtin", "gymnasium").
      record_every: the recorder writes stats every this many steps.
      on_step: called with the number of steps done (progress display).
    """

    twin: str
    run_dir: str
    steps: int
    seed: int = DEFAULT_SEED
    env: str = "auto"
    record_every: int = DEFAULT_RECORD_EVERY
    on_step: Callable[[int], None] = lambda done: None


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What a run reports back: last value of each loss, and a word on the setup."""

    losses: Mapping[str, float]
    note: str = ""


@dataclasses.dataclass(frozen=True)
class Demo:
    """A seed scenario as a runnable model with a clean and a leaky twin.

    Attributes:
      name: the directory name under LOGDIR and the --only choice.
      title: one line saying what the demo trains.
      leak: one line saying what the leaky twin does wrong.
      rules: expectations the clean twin keeps and the leaky twin breaks, as
        plain strings for the rules engine (`never(td, target/*)`: loss `td`
        never updates a scope matching `target/*`).
      train: trains one twin and writes its run directory.
      default_steps: steps used by `tb-gradscope demo` without --steps.
      twins: the run directories it writes, CLEAN first.
    """

    name: str
    title: str
    leak: str
    rules: tuple[str, ...]
    train: Callable[[RunSpec], RunResult]
    default_steps: int
    twins: tuple[str, ...] = (CLEAN, LEAKY)


def framework(name: str) -> str:
    """The package a demo trains with: "torch" or "tensorflow"."""
    return "torch" if name in TORCH_DEMO_NAMES else "tensorflow"


def installed(name: str) -> bool:
    """Whether the framework demo `name` needs can be imported here."""
    return importlib.util.find_spec(framework(name)) is not None


def prepare_imports(names: Sequence[str]) -> None:
    """Imports what must load first when `names` mix frameworks.

    A process that has imported tensorflow crashes (SIGSEGV) the first time
    torch loads triton, which a torch optimizer's constructor does through
    `torch._dynamo`; importing `torch._dynamo` before tensorflow avoids it.
    """
    if any(framework(n) == "torch" for n in names):
        import torch._dynamo  # noqa: F401


def load_demo(name: str) -> Demo:
    """Imports `tb_gradscope.demos.<name>` and returns its DEMO.

    Raises:
      ValueError: `name` is not a known demo.
    """
    if name not in DEMO_NAMES:
        raise ValueError(f"unknown demo {name!r}; choose from {', '.join(DEMO_NAMES)}")
    module = importlib.import_module(f"tb_gradscope.demos.{name}")
    return module.DEMO
