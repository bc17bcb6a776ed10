"""A fixed-size replay memory of transitions, sampled with a seeded generator."""

from __future__ import annotations

import numpy as np


class ReplayBuffer:
    """Stores (s, a, r, s2, done) transitions in numpy rings; samples uniformly.

    Example:
      buf = ReplayBuffer(capacity=1000, observation_size=4, seed=0)
      buf.add(s, a, r, s2, done)
      s, a, r, s2, done = buf.sample(32)
    """

    def __init__(self, capacity: int, observation_size: int, seed: int):
        self._s = np.zeros((capacity, observation_size), np.float32)
        self._s2 = np.zeros((capacity, observation_size), np.float32)
        self._a = np.zeros((capacity,), np.int32)
        self._r = np.zeros((capacity,), np.float32)
        self._done = np.zeros((capacity,), np.float32)
        self._capacity = capacity
        self._size = 0
        self._next = 0
        self._rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self._size

    def add(self, s: np.ndarray, a: int, r: float, s2: np.ndarray, done: bool) -> None:
        i = self._next
        self._s[i], self._a[i], self._r[i], self._s2[i], self._done[i] = s, a, r, s2, done
        self._next = (i + 1) % self._capacity
        self._size = min(self._size + 1, self._capacity)

    def sample(self, batch_size: int) -> tuple[np.ndarray, ...]:
        """A batch of (s, a, r, s2, done); raises if the buffer is empty."""
        if self._size == 0:
            raise ValueError("ReplayBuffer.sample called before any transition was added")
        idx = self._rng.integers(0, self._size, size=batch_size)
        return self._s[idx], self._a[idx], self._r[idx], self._s2[idx], self._done[idx]
