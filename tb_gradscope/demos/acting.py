"""Acting in the RL demos, TF and PyTorch alike: the exploration schedule and epsilon-greedy."""

from __future__ import annotations

import numpy as np


def epsilon(step: int, steps: int, start: float = 1.0, end: float = 0.05) -> float:
    """Exploration rate falling linearly from `start` to `end` over the first half."""
    frac = min(1.0, step / max(1, steps // 2))
    return start + frac * (end - start)


def epsilon_greedy(q_values: np.ndarray, eps: float, rng: np.random.Generator) -> int:
    """A random action with probability `eps`, else the greedy one."""
    if rng.random() < eps:
        return int(rng.integers(q_values.shape[-1]))
    return int(np.argmax(q_values))
