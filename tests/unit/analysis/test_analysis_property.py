"""Generated models: the static flow states agree with TF itself.

Per variable: gradient-reachable (updates/ignored) <=> `tape.gradient` is not
None; forward-reachable (anything but independent) <=> the loss changes when
the variable changes.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tb_gradscope.analysis import analyze_function

TREATMENTS = (
    "none",
    "stop_gradient",
    "argmax",
    "int_cast",
    "numpy_function",
    "py_function",
    "custom_gradient_none",
    "cond",
    "while_loop",
)
X = tf.constant(np.random.default_rng(0).normal(size=(8, 3)).astype("float32"))
# Non-uniform loss weights, so a one-hot or rounded output still moves the loss.
C = tf.constant(np.random.default_rng(1).normal(size=(8, 3)).astype("float32"))


@tf.custom_gradient
def _no_gradient(h):
    return h * 1.0, lambda dy: None


def treat(kind: str, h: tf.Tensor) -> tf.Tensor:
    if kind == "custom_gradient_none":
        return _no_gradient(h)
    if kind == "cond":
        return tf.cond(tf.reduce_sum(h) > 0, lambda: h * 2.0, lambda: h - 1.0)
    if kind == "while_loop":
        return tf.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, tf.tanh(a) * 1.5), [0, h])[1]
    if kind == "stop_gradient":
        return tf.stop_gradient(h)
    if kind == "argmax":
        return tf.one_hot(tf.argmax(h, axis=1), 3)
    if kind == "int_cast":
        return tf.cast(tf.cast(h * 10.0, tf.int32), tf.float32) / 10.0
    if kind in ("numpy_function", "py_function"):
        wrap = tf.numpy_function if kind == "numpy_function" else tf.py_function
        out = wrap(lambda a: a * 2.0, [h], tf.float32)
        out.set_shape(h.shape)
        return out
    return h


scope_part = st.text(alphabet="abcxyz_", min_size=1, max_size=5)


@st.composite
def models(draw):
    n = draw(st.integers(2, 5))
    layers = []
    for i in range(n):
        source = -1 if i == 0 else draw(st.integers(-1, i - 1))
        layers.append((source, draw(st.sampled_from(TREATMENTS))))
    used = draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=n, unique=True))
    prefixes = [draw(st.lists(scope_part, min_size=1, max_size=3)) for _ in range(n)]
    scopes = ["/".join(p + [f"v{i}"]) for i, p in enumerate(prefixes)]
    return layers, sorted(used), scopes


def build(layers, used, seed):
    rng = np.random.default_rng(seed)
    variables = [tf.Variable(rng.normal(size=(3, 3)).astype("float32")) for _ in layers]

    def step(x):
        treated = []
        for (source, kind), w in zip(layers, variables):
            inp = x if source < 0 else treated[source]
            treated.append(treat(kind, tf.tanh(inp @ w)))
        return {"loss": tf.add_n([tf.reduce_sum(treated[k] * C) for k in used])}

    return variables, step


def tf_truth(variables, step, seed):
    """Per variable: (tape.gradient is not None, the loss moves when it moves)."""

    @tf.function
    def grads(x):
        with tf.GradientTape() as tape:
            loss = step(x)["loss"]
        return tape.gradient(loss, variables)

    reachable = [g is not None for g in grads(X)]
    rng = np.random.default_rng(seed + 1)
    base = float(step(X)["loss"])
    moves = []
    for v in variables:
        original = v.numpy()
        moved = False
        for _ in range(4):
            v.assign(original + rng.normal(scale=3.0, size=original.shape).astype("float32"))
            moved = moved or abs(float(step(X)["loss"]) - base) > 1e-6
        v.assign(original)
        moves.append(moved)
    return reachable, moves


@pytest.mark.slow
@settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(model=models(), seed=st.integers(0, 2**16))
def test_static_states_match_tape_gradient_and_perturbation(model, seed):
    layers, used, scopes = model
    variables, step = build(layers, used, seed)
    fg = analyze_function(step, tf.TensorSpec([8, 3]), variable_scopes=list(zip(variables, scopes)))
    reachable, moves = tf_truth(variables, step, seed)
    for scope, grad_ok, moved in zip(scopes, reachable, moves):
        state = fg.cells["loss"][scope]
        assert (state in ("updates", "ignored")) == grad_ok, (scope, state, layers, used)
        assert (state != "independent") == moved, (scope, state, layers, used)
        if state == "blocked":
            assert any(e.producer_scope for e in fg.blocked_edges), fg.blocked_edges
