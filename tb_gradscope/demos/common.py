"""Pieces the TF demos share: seeding, small Keras networks, target-network updates."""

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from tb_gradscope.demos.acting import epsilon, epsilon_greedy

__all__ = [
    "ema_update",
    "epsilon",
    "epsilon_greedy",
    "hard_copy",
    "mlp",
    "seed_everything",
    "weights",
]


def seed_everything(seed: int) -> None:
    """Makes a run repeatable: fresh Keras state, seeded RNGs, deterministic ops.

    Clearing the Keras session first means a run's layer names and initial
    weights do not depend on which demos ran before it in the same process.
    """
    keras.backend.clear_session()
    keras.utils.set_random_seed(seed)
    tf.config.experimental.enable_op_determinism()


def mlp(
    name: str, input_size: int, hidden: Sequence[int], outputs: int, output_name: str = "q"
) -> keras.Model:
    """A functional MLP whose layers are named l1, l2, ... and `output_name`.

    Functional models give their variables no model prefix (`l1/kernel`); the
    recorder puts the model's name in front (`online/l1`).
    """
    inputs = keras.Input((input_size,), name=f"{name}_obs")
    x = inputs
    for i, units in enumerate(hidden, start=1):
        x = keras.layers.Dense(units, activation="relu", name=f"l{i}")(x)
    out = keras.layers.Dense(outputs, name=output_name)(x)
    return keras.Model(inputs, out, name=name)


def weights(model: keras.Model) -> list:
    """The model's floating-point variables: what a target network mirrors.

    Keras 3 layers such as LSTM also own an int64 seed-generator state, which
    is not a weight and must not be averaged.
    """
    return [v for v in model.variables if "float" in str(v.dtype)]


def hard_copy(online: keras.Model, target: keras.Model) -> None:
    """target <- online, weight by weight (a DQN target sync)."""
    for t, o in zip(weights(target), weights(online)):
        t.assign(o)


def ema_update(online: keras.Model, target: keras.Model, decay: float) -> None:
    """target <- decay * target + (1 - decay) * online (Polyak averaging)."""
    for t, o in zip(weights(target), weights(online)):
        t.assign(decay * t + (1.0 - decay) * o)
