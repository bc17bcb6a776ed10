"""Seed 01's task, shared by the TF and PyTorch `multihead` demos: sizes, rules, data."""

from __future__ import annotations

import numpy as np

INPUT_DIM = 100
N1 = 50
BATCH = 64

RULES = (
    "never(loss2, Agent/layer1)",
    "only(loss2, Agent/layer2_2)",
    "never(loss1, Agent/layer2_2)",
)


def make_task(seed: int, n: int = 2048) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """X and two targets that are linear in a shared 8-dimensional feature."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, INPUT_DIM)).astype(np.float32)
    features = np.tanh(x @ rng.normal(size=(INPUT_DIM, 8)) / np.sqrt(INPUT_DIM))
    y1 = features @ rng.normal(size=(8, 1)) + 0.05 * rng.normal(size=(n, 1))
    y2 = features @ rng.normal(size=(8, 1)) + 0.05 * rng.normal(size=(n, 1))
    return x, y1.astype(np.float32), y2.astype(np.float32)


__all__ = ["BATCH", "INPUT_DIM", "N1", "RULES", "make_task"]
