"""Environments for the RL demos: gymnasium's CartPole when installed, else our own.

The built-in `CartPole` follows gymnasium's CartPole-v1 dynamics (Euler
integration, 12 degree / 2.4 m limits, 500-step episodes) in plain numpy, so
the demos run, and CI tests them, without the optional `gym` extra. Both are
wrapped behind the same three-method interface (`reset`, `step`, the sizes).
"""

from __future__ import annotations

import math
from typing import Protocol

import numpy as np

BUILTIN = "builtin"
GYMNASIUM = "gymnasium"
AUTO = "auto"
ENV_CHOICES = (AUTO, BUILTIN, GYMNASIUM)


class Env(Protocol):
    """What the demos need of an environment."""

    name: str
    observation_size: int
    num_actions: int

    def reset(self) -> np.ndarray: ...

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        """Returns (observation, reward, terminated, truncated)."""
        ...


class CartPole:
    """A pole on a cart: push left (0) or right (1) to keep it upright.

    Reward 1 per step; terminated when the pole leans past 12 degrees or the
    cart leaves [-2.4, 2.4]; truncated after `max_steps`.
    """

    name = "builtin CartPole"
    observation_size = 4
    num_actions = 2

    _GRAVITY = 9.8
    _CART_MASS = 1.0
    _POLE_MASS = 0.1
    _HALF_LENGTH = 0.5
    _FORCE = 10.0
    _TAU = 0.02
    _THETA_LIMIT = 12 * 2 * math.pi / 360
    _X_LIMIT = 2.4

    def __init__(self, seed: int, max_steps: int = 500):
        self._rng = np.random.default_rng(seed)
        self._max_steps = max_steps
        self._state = np.zeros(4)
        self._t = 0

    def reset(self) -> np.ndarray:
        self._state = self._rng.uniform(-0.05, 0.05, size=4)
        self._t = 0
        return self._state.astype(np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        if action not in (0, 1):
            raise ValueError(f"CartPole action must be 0 or 1, got {action!r}")
        x, x_dot, theta, theta_dot = self._state
        force = self._FORCE if action == 1 else -self._FORCE
        total_mass = self._CART_MASS + self._POLE_MASS
        pole_moment = self._POLE_MASS * self._HALF_LENGTH
        cos, sin = math.cos(theta), math.sin(theta)
        temp = (force + pole_moment * theta_dot**2 * sin) / total_mass
        theta_acc = (self._GRAVITY * sin - cos * temp) / (
            self._HALF_LENGTH * (4.0 / 3.0 - self._POLE_MASS * cos**2 / total_mass)
        )
        x_acc = temp - pole_moment * theta_acc * cos / total_mass
        x += self._TAU * x_dot
        x_dot += self._TAU * x_acc
        theta += self._TAU * theta_dot
        theta_dot += self._TAU * theta_acc
        self._state = np.array([x, x_dot, theta, theta_dot])
        self._t += 1
        terminated = abs(x) > self._X_LIMIT or abs(theta) > self._THETA_LIMIT
        truncated = not terminated and self._t >= self._max_steps
        return self._state.astype(np.float32), 1.0, terminated, truncated


class GymnasiumCartPole:
    """gymnasium's CartPole-v1 behind the demos' interface."""

    name = "gymnasium CartPole-v1"
    observation_size = 4
    num_actions = 2

    def __init__(self, seed: int):
        import gymnasium

        self._env = gymnasium.make("CartPole-v1")
        self._seed: int | None = seed

    def reset(self) -> np.ndarray:
        obs, _ = self._env.reset(seed=self._seed)
        self._seed = None  # seed once; later resets continue the same stream
        return np.asarray(obs, dtype=np.float32)

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool]:
        obs, reward, terminated, truncated, _ = self._env.step(int(action))
        return np.asarray(obs, np.float32), float(reward), bool(terminated), bool(truncated)


def gymnasium_available() -> bool:
    try:
        import gymnasium  # noqa: F401
    except ImportError:
        return False
    return True


def make_cartpole(seed: int, which: str = AUTO) -> Env:
    """CartPole from gymnasium (`which="gymnasium"`, or "auto" when installed) or built in.

    Raises:
      ValueError: `which` is not one of ENV_CHOICES, or "gymnasium" was asked
        for and is not installed.
    """
    if which not in ENV_CHOICES:
        raise ValueError(f"environment {which!r} is unknown; use one of {ENV_CHOICES}")
    if which == GYMNASIUM and not gymnasium_available():
        raise ValueError(
            "environment 'gymnasium' asked for but gymnasium is not installed; "
            "pip install 'tb-gradscope[gym]' or use --env builtin"
        )
    if which == GYMNASIUM or (which == AUTO and gymnasium_available()):
        return GymnasiumCartPole(seed)
    return CartPole(seed)
