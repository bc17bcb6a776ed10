"""Every private Keras symbol the callback uses, touched once on a real compiled model.

They all live in `integrations/keras/_keras_private.py`; a Keras (or tf_keras)
upgrade that moves one fails here, by name, before any callback test does.
"""

from __future__ import annotations

import ast
import inspect
import pathlib

import keras
import numpy as np
import tensorflow as tf

# tf-keras is in the `test` extra: a missing one fails here, never skips green.
import tf_keras

from tb_gradscope.integrations.keras import _keras_private as private

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "tb_gradscope" / "integrations" / "keras"
PUBLIC_FUNCTIONS = {
    name for name, obj in vars(private).items()
    if inspect.isfunction(obj) and obj.__module__ == private.__name__ and not name.startswith("_")
}


def _two_outputs(lib):
    inputs = lib.Input((3,))
    q = lib.layers.Dense(1, name="q")(inputs)
    aux = lib.layers.Dense(1, name="aux")(inputs)
    model = lib.Model(inputs, {"q": q, "aux": aux}, name="agent")
    model.compile("sgd", loss={"q": "mse", "aux": "mse"}, loss_weights={"q": 1.0, "aux": 0.5}, steps_per_execution=2)
    return model


def _train_once(model):
    y = np.zeros([8, 1], np.float32)
    model.fit(np.ones([8, 3], np.float32), {"q": y, "aux": y}, batch_size=4, verbose=0)


def test_keras3_compile_loss_entries_are_read_and_replaced():
    model = _two_outputs(keras)
    container = private.compile_loss(model)
    assert container is not None and private.has_flat_losses(container)
    assert not private.flat_losses(container)  # built inside the first traced step
    _train_once(model)
    entries = private.flat_losses(container)
    assert [(e.name, float(e.loss_weights)) for e in entries] == [("q", 1.0), ("aux", 0.5)]
    assert all(callable(e.loss) for e in entries)
    replaced = [private.with_loss_fn(e, abs) for e in entries]
    assert [e.loss for e in replaced] == [abs, abs] and replaced[0].name == "q"
    private.set_flat_losses(container, replaced)
    assert private.flat_losses(container) == replaced
    private.set_flat_losses(container, entries)
    assert private.flat_losses(container) == entries


def test_tf_keras_losses_container_is_read_and_replaced():
    model = _two_outputs(tf_keras)
    container = model.compiled_loss
    assert private.legacy_is_loss_container(container)
    assert not private.legacy_built(container)
    _train_once(model)
    assert private.legacy_built(container)
    assert sorted(private.legacy_output_names(container)) == ["aux", "q"]
    weights = dict(zip(private.legacy_output_names(container), private.legacy_loss_weights(container)))
    assert weights == {"q": 1.0, "aux": 0.5}
    losses = private.legacy_loss_functions(container)
    assert len(losses) == 2 and all(callable(fn) for fn in losses)
    private.legacy_set_loss_functions(container, [abs, abs])
    assert private.legacy_loss_functions(container) == [abs, abs]
    private.legacy_set_loss_functions(container, losses)
    assert int(tf.convert_to_tensor(private.legacy_steps_per_execution(model))) == 2


def test_private_keras_symbols_are_used_nowhere_else_in_the_package():
    """Outside `_keras_private.py`, no module of integrations/keras reads a
    private attribute of another object (self's own and dunders aside)."""
    offenders = []
    for path in PACKAGE.glob("*.py"):
        if path.name == "_keras_private.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            attr = None
            if isinstance(node, ast.Attribute):
                attr = node.attr
                owner = node.value.id if isinstance(node.value, ast.Name) else None
                if owner in ("self", "cls", "private") or attr.startswith("__"):
                    continue
            elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr"):
                if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
                    attr = node.args[1].value
            if attr and attr.startswith("_") and not attr.startswith("__") and not attr.startswith("_gradscope"):
                offenders.append(f"{path.name}:{node.lineno} {attr}")
    assert offenders == [], "private attributes outside _keras_private.py: " + ", ".join(offenders)


def test_every_private_accessor_is_touched_by_these_tests():
    source = pathlib.Path(__file__).read_text()
    assert PUBLIC_FUNCTIONS and all(f"private.{name}(" in source for name in PUBLIC_FUNCTIONS), PUBLIC_FUNCTIONS
