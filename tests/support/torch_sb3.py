"""What the SB3 callback's tests share: tiny seeded algorithms and doctor's verdict."""

from __future__ import annotations

import io
import json
from typing import Any

from stable_baselines3 import DQN

from tb_gradscope.cli import build_parser

DQN_STEPS = 600  # 550 env steps of training: 137 or 138 gradient steps


def tiny(**kwargs: Any) -> dict:
    """Tiny nets on the CPU, seeded; a fresh dict each time (SAC writes into policy_kwargs)."""
    return {"policy_kwargs": {"net_arch": [16]}, "device": "cpu", "seed": 0, **kwargs}


def make_dqn(cls: type = DQN, **kwargs: Any) -> Any:
    """A DQN on CartPole whose target copy (every 100 env steps, 1 gradient
    step per 4) comes every 25 gradient steps."""
    return cls(
        "MlpPolicy", "CartPole-v1", learning_starts=50, target_update_interval=100, **tiny(**kwargs)
    )


def doctor(logdir: str, *extra: str) -> tuple[int, list[dict]]:
    """`tb-gradscope doctor LOGDIR --format json`: (exit status, the one run's findings)."""
    args = build_parser().parse_args(["doctor", logdir, "--format", "json", *extra])
    out = io.StringIO()
    code = args.run(args, out, io.StringIO())
    (run,) = json.loads(out.getvalue())["runs"]
    return code, run["findings"]
