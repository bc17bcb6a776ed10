"""Seed 03's task for the PyTorch `torch_ema_lstm` demo: sizes, rules, data.

The same task as the TF `ema_lstm` demo, which keeps its own copy: its
committed logs cite its source lines, so its text does not move
(tests/unit/demos/test_demos_parts.py holds the two copies equal).
"""

from __future__ import annotations

import numpy as np

GAMMA = 0.9
DECAY = 0.99
WINDOW = 8
UNITS = 16
BATCH = 32

RULES = (
    "never(td, target/*)",
    f"tracks(target, online, tau={1.0 - DECAY:g})",
)


def sample_windows(rng: np.random.Generator, batch: int) -> tuple[np.ndarray, ...]:
    """Windows s and s2 (s shifted by one) of noisy sines, and the reward between them."""
    t = np.arange(WINDOW + 1, dtype=np.float32)
    freq = rng.uniform(0.2, 0.6, size=(batch, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(batch, 1))
    x = np.sin(freq * t + phase) + 0.05 * rng.normal(size=(batch, WINDOW + 1))
    x = x.astype(np.float32)[..., None]
    return x[:, :WINDOW], x[:, WINDOW, 0], x[:, 1:]


__all__ = ["BATCH", "DECAY", "GAMMA", "RULES", "UNITS", "WINDOW", "sample_windows"]
