"""Helpers for the recorder tests: read logs back through TensorBoard, recompute in numpy.

`read_records` goes through TensorBoard's own Python data provider (the
multiplexer), so what the tests check is what the plugin will see. `np_grad_table`
and `np_update_table` are independent numpy recomputations of the stats from the
gradients and weights, scope by scope, straight from the variable names.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope import scopes as scopes_lib
from tests.support.providers import read_records  # noqa: F401 - where the TF tests read it


def members(scope: str, leaves: Sequence[str]) -> list[int]:
    """Indices of the variables under `scope` (recomputed from the leaf names)."""
    prefix = scope + scopes_lib.SEPARATOR
    return [i for i, leaf in enumerate(leaves) if leaf == scope or leaf.startswith(prefix)]


def np_grad_table(
    scopes: Sequence[str], leaves: Sequence[str], grads: Sequence[np.ndarray | None]
) -> np.ndarray:
    """GRAD_STATS rows recomputed in float64 numpy from dense gradients (None = no gradient)."""
    rows = []
    for scope in scopes:
        present = [grads[i] for i in members(scope, leaves) if grads[i] is not None]
        if not present:
            rows.append([0, 0, 0, 0, 0])
            continue
        flat = np.concatenate([np.asarray(g, np.float64).ravel() for g in present])
        finite = np.isfinite(flat)
        rows.append(
            [
                len(present),
                np.sqrt(np.sum(flat**2)),
                np.max(np.abs(flat[finite]), initial=0.0),
                np.sum(~finite),
                np.mean(flat == 0) if flat.size else 0.0,
            ]
        )
    return np.asarray(rows, np.float64)


def np_update_table(
    scopes: Sequence[str],
    leaves: Sequence[str],
    before: Sequence[np.ndarray],
    after: Sequence[np.ndarray],
) -> np.ndarray:
    """UPDATE_STATS rows: ||after - before|| and ||after|| per scope, float64 numpy."""
    rows = []
    for scope in scopes:
        idx = members(scope, leaves)
        step = sum(np.sum((np.float64(after[i]) - np.float64(before[i])) ** 2) for i in idx)
        weight = sum(np.sum(np.float64(after[i]) ** 2) for i in idx)
        rows.append([np.sqrt(step), np.sqrt(weight)])
    return np.asarray(rows, np.float64)


def assert_table_close(actual: Any, expected: np.ndarray, what: str, rtol: float = 1e-5) -> None:
    """Compares a recorded table to numpy within rtol (atol scaled for tiny values)."""
    values = actual.values if hasattr(actual, "values") else np.asarray(actual)
    np.testing.assert_allclose(values, expected, rtol=rtol, atol=1e-6, err_msg=what)


def leaves_of(layout: Any) -> list[str]:
    return list(layout.layout.variable_leaf)


def dense(grad: Any) -> np.ndarray | None:
    """A gradient as a dense numpy array (None stays None)."""
    if grad is None:
        return None
    return tf.convert_to_tensor(grad).numpy()


def only(records: Mapping[str, Any]) -> Any:
    """The records of the single run of a logdir."""
    assert len(records) == 1, f"expected one run, got {sorted(records)}"
    return next(iter(records.values()))


def two_head_model(name: str = "online", seed: int = 0) -> Any:
    """Shared trunk, head `a` on it, head `b` behind tf.stop_gradient (Keras 3 functional)."""
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,), name="x")
    trunk = keras.layers.Dense(8, activation="tanh", name="trunk")(inputs)
    head_a = keras.layers.Dense(1, name="head_a")(trunk)
    blocked = keras.layers.Lambda(tf.stop_gradient, name="stop")(trunk)
    head_b = keras.layers.Dense(1, name="head_b")(blocked)
    return keras.Model(inputs, [head_a, head_b], name=name)


def batch(step: int, size: int = 16) -> tuple[tf.Tensor, tf.Tensor]:
    """A deterministic batch for a step: inputs [size, 5] and targets [size, 1]."""
    rng = np.random.default_rng(1000 + step)
    x = rng.normal(size=(size, 5)).astype(np.float32)
    y = rng.normal(size=(size, 1)).astype(np.float32)
    return tf.constant(x), tf.constant(y)


def two_losses(model: Any, x: tf.Tensor, y: tf.Tensor) -> dict[str, tf.Tensor]:
    a, b = model(x)
    return {"a": tf.reduce_mean((a - y) ** 2), "b": tf.reduce_mean((b - y) ** 2)}


def shared_trunk_model(name: str = "net", seed: int = 0) -> Any:
    """A trunk both heads read (no stop_gradient): losses on the heads share it."""
    import keras

    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5,), name="x")
    trunk = keras.layers.Dense(6, activation="tanh", name="trunk")(inputs)
    head_a = keras.layers.Dense(1, name="head_a")(trunk)
    head_b = keras.layers.Dense(1, name="head_b")(trunk)
    return keras.Model(inputs, [head_a, head_b], name=name)


def np_cosine(grads_a: Sequence[Any], grads_b: Sequence[Any], idx: Sequence[int]) -> float:
    """The cosine of two losses' gradients over the variables `idx`, in float64.

    A None gradient counts as zeros (it adds nothing to the dot product)."""
    dot = sq_a = sq_b = 0.0
    for i in idx:
        a = None if grads_a[i] is None else np.asarray(grads_a[i], np.float64).ravel()
        b = None if grads_b[i] is None else np.asarray(grads_b[i], np.float64).ravel()
        if a is not None:
            sq_a += a @ a
        if b is not None:
            sq_b += b @ b
        if a is not None and b is not None:
            dot += a @ b
    return float(dot / np.sqrt(sq_a * sq_b))
