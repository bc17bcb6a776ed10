"""Small pieces the TF2 shapes share: seeded data, tiny models, target updates,
and probe builders, so each shape file reads as its training loop.

Models use tanh (no dead units: a zero gradient would be a numerical accident,
not a flow fact) and a few units; data is a pure function of the step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tests.support.corpus import oracle
from tests.support.corpus.spec import Forward, LossProbe, PairProbe

OBS, ACTIONS, BATCH = 3, 2, 8


def seed(n: int) -> None:
    keras.utils.set_random_seed(n)


def mlp(
    name: str, sizes: Sequence[int], inputs: int = OBS, activation: str = "tanh"
) -> keras.Sequential:
    """A Sequential of Dense layers, the last one linear, built on `inputs` features."""
    layers = [keras.Input((inputs,))]
    for i, size in enumerate(sizes):
        last = i == len(sizes) - 1
        layers.append(
            keras.layers.Dense(size, activation=None if last else activation, name=f"l{i + 1}")
        )
    return keras.Sequential(layers, name=name)


def batch(
    step: int, obs: int = OBS, actions: int = ACTIONS, n: int = BATCH
) -> dict[str, tf.Tensor]:
    """A transition batch that is a pure function of `step`."""
    rng = np.random.default_rng(1000 + step)
    return {
        "s": tf.constant(rng.normal(size=(n, obs)), tf.float32),
        "a": tf.constant(rng.integers(0, actions, size=n), tf.int32),
        "a_cont": tf.constant(rng.uniform(-1, 1, size=(n, actions)), tf.float32),
        "r": tf.constant(rng.normal(size=n), tf.float32),
        "s2": tf.constant(rng.normal(size=(n, obs)), tf.float32),
        "done": tf.constant((rng.uniform(size=n) < 0.2).astype(np.float32)),
        "noise": tf.constant(rng.normal(size=(n, actions)), tf.float32),
        "y": tf.constant(rng.normal(size=(n, 1)), tf.float32),
    }


def copy_weights(target: Any, online: Any) -> None:
    for t, o in zip(target.weights, online.weights):
        t.assign(o)


def polyak(target: Any, online: Any, tau: float) -> None:
    for t, o in zip(target.weights, online.weights):
        t.assign((1.0 - tau) * t + tau * o)


def grads_of(loss: Any, tape: tf.GradientTape, variables: Sequence[Any]) -> list[tuple[Any, Any]]:
    """(gradient, variable) pairs with None gradients left out (what an optimizer applies)."""
    return [(g, v) for g, v in zip(tape.gradient(loss, variables), variables) if g is not None]


def loss_probe(
    name: str,
    forward: Callable[[], Forward],
    optimizer: Any,
    variables: Callable[[], Sequence[Any]],
) -> LossProbe:
    """A probe whose own update applies this loss's gradient with `optimizer`
    over `variables()` (the step's var_list for that optimizer)."""

    def update() -> None:
        built(optimizer, variables())
        f = forward()
        pairs = [
            (g, v)
            for g, v in zip(
                f.tape.gradient(f.value, variables(), output_gradients=f.output_gradients),
                variables(),
            )
            if g is not None
        ]
        if pairs:
            optimizer.apply_gradients(pairs)

    return LossProbe(name, forward, update)


def built(optimizer: Any, variables: Sequence[Any]) -> Any:
    """Builds a Keras optimizer on the step's whole var_list (as the step's own
    apply does) before an oracle update applies only the non-None gradients."""
    if not getattr(optimizer, "built", True):
        optimizer.build(list(variables))
    return optimizer


def taped(fn: Callable[[], Any], before: Callable[[], Any] | None = None) -> Callable[[], Forward]:
    """A Forward maker: `before()` runs outside the tape (the step's pre-tape
    work), `fn(pre)` inside it, as the step does."""

    def forward() -> Forward:
        pre = before() if before is not None else None
        with tf.GradientTape() as tape:
            value = fn(pre)
        return Forward(tape, value)

    return forward


def pair_probe(pair: Any, target: Any, online: Any, root: str) -> PairProbe:
    """The probe of a product Pair made from two models (`root` = the target's key)."""
    named = oracle.named_variables({root: target})
    return PairProbe(pair.name, named, list(online.weights))


def variables_of(models: Mapping[str, Any]) -> dict[str, Any]:
    return oracle.named_variables(models)
