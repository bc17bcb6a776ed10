"""Named losses and gradient start points, and checks on what users pass in.

A loss is a scalar tensor. A start point (seed 02, DQN 3.0) is a tensor plus
the output gradients fed into it: `tape.gradient(q_all, vars,
output_gradients=targets)`, or `tf.gradients(q_all, vars, grad_ys=targets)`.
Every check runs at trace time and names the loss and the fix.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope._naming import full_name


@dataclasses.dataclass(frozen=True)
class StartPoint:
    """A gradient start point: `tensor` seeded with `output_gradients`.

    `output_gradients` has the tensor's shape (None means ones, as in
    `tape.gradient`).
    """

    tensor: Any
    output_gradients: Any = None


def check_loss_names(losses: Mapping[str, Any], what: str) -> None:
    """Raises unless `losses` is a non-empty mapping with non-empty str names."""
    if not isinstance(losses, Mapping) or not losses:
        raise ValueError(
            f"{what} takes a dict {{loss_name: ...}} with at least one loss, "
            f"got {type(losses).__name__}; e.g. {{'td': td_loss}}"
        )
    for name in losses:
        if not isinstance(name, str) or not name:
            raise ValueError(
                f"{what}: loss name {name!r} is not a non-empty str; "
                "name each loss, e.g. {'td': td_loss}"
            )


def check_loss(name: str, value: Any) -> None:
    """Raises unless `value` is a scalar tensor or a StartPoint."""
    if isinstance(value, StartPoint):
        tensor = value.tensor
        if value.output_gradients is not None:
            t_shape = tf.TensorShape(getattr(tensor, "shape", None))
            g_shape = tf.TensorShape(getattr(value.output_gradients, "shape", None))
            if not t_shape.is_compatible_with(g_shape):
                raise ValueError(
                    f"start point '{name}': output_gradients have shape "
                    f"{g_shape.as_list() if g_shape.rank is not None else '?'}, "
                    f"the tensor has shape {t_shape.as_list()}; pass one gradient "
                    "per element of the tensor"
                )
        return
    shape = getattr(value, "shape", None)
    if shape is None:
        raise ValueError(
            f"loss '{name}' is a {type(value).__name__}, not a tensor; pass the "
            "scalar loss tensor, or StartPoint(tensor, output_gradients=...)"
        )
    shape = tf.TensorShape(shape)
    if shape.rank is not None and shape.rank != 0:
        raise ValueError(
            f"loss '{name}' is not a scalar (shape {shape.as_list()}); pass "
            "tf.reduce_mean(...) of it, or StartPoint(tensor, output_gradients=...) "
            "to start the gradient from a non-scalar tensor"
        )


def target_and_seed(value: Any) -> tuple[Any, Any]:
    """(tensor to differentiate, its output gradients or None)."""
    if isinstance(value, StartPoint):
        return value.tensor, value.output_gradients
    return value, None


def check_pairs(loss: str, grads_and_vars: Any) -> list[tuple[Any, Any]]:
    """Materialises grads_and_vars and checks each gradient against its variable."""
    try:
        pairs = [tuple(p) for p in grads_and_vars]
    except TypeError:
        raise ValueError(
            f"loss '{loss}': grads_and_vars is a {type(grads_and_vars).__name__}; "
            "pass list(zip(grads, variables))"
        ) from None
    for i, pair in enumerate(pairs):
        if len(pair) != 2 or not hasattr(pair[1], "dtype"):
            raise ValueError(
                f"loss '{loss}': item {i} of grads_and_vars is not a "
                "(gradient, variable) pair; pass list(zip(grads, variables))"
            )
        grad, var = pair
        if grad is None:
            continue
        g_shape = _grad_shape(grad)
        if not g_shape.is_compatible_with(tf.TensorShape(var.shape)):
            raise ValueError(
                f"loss '{loss}': the gradient for variable '{full_name(var)}' has "
                f"shape {_fmt(g_shape)}, the variable has shape "
                f"{_fmt(tf.TensorShape(var.shape))}; grads and variables are "
                "mismatched, pass list(zip(tape.gradient(loss, variables), variables))"
            )
    return pairs


def check_variables(variables: Any, what: str) -> list[Any]:
    """Materialises a sequence of variables."""
    if isinstance(variables, (str, bytes)) or not isinstance(variables, Sequence):
        try:
            variables = list(variables)
        except TypeError:
            raise ValueError(
                f"{what}: variables is a {type(variables).__name__}; pass a list "
                "of variables such as model.trainable_variables"
            ) from None
    for v in variables:
        if not hasattr(v, "dtype") or not hasattr(v, "assign"):
            raise ValueError(
                f"{what}: {v!r} is not a variable; pass a list of variables such as "
                "model.trainable_variables"
            )
    return list(variables)


def check_given(
    grads_by_loss: Mapping[str, Any], losses: Mapping[str, Any] | None
) -> dict[str, list]:
    """`record_gradients`' arguments checked: {loss: grads_and_vars as a list}."""
    check_loss_names(grads_by_loss, "record_gradients")
    pairs_by_loss = {name: check_pairs(name, gv) for name, gv in grads_by_loss.items()}
    if losses is not None:
        check_loss_names(losses, "record_gradients(losses=...)")
        for name, value in losses.items():
            check_loss(name, value)
    return pairs_by_loss


def check_gradients_call(tape: Any, losses: Mapping[str, Any], variables: Any) -> list[Any]:
    """`Recorder.gradients`' arguments checked; returns the variables as a list."""
    check_loss_names(losses, "gradients")
    for name, value in losses.items():
        check_loss(name, value)
    variables = check_variables(variables, "gradients")
    if not variables:
        raise ValueError(
            "gradients: variables is empty; pass the variables to differentiate, "
            "e.g. model.trainable_variables"
        )
    if len(losses) > 1 and not private.tape_is_persistent(tape):
        raise ValueError(
            "gradients needs a persistent tape to compute each loss's gradients: "
            "use `with rec.tape() as tape:` or tf.GradientTape(persistent=True)"
        )
    return variables


def _grad_shape(grad: Any) -> tf.TensorShape:
    if isinstance(grad, tf.IndexedSlices):
        if grad.dense_shape is not None:
            static = tf.get_static_value(grad.dense_shape)
            if static is not None:
                return tf.TensorShape([int(d) for d in static])
        return tf.TensorShape([None]).concatenate(grad.values.shape[1:])
    return tf.TensorShape(getattr(grad, "shape", None))


def _fmt(shape: tf.TensorShape) -> str:
    return str(shape.as_list()) if shape.rank is not None else "unknown"


def check_split_optimizers(optimizer: Any, variables: Any) -> dict[str, tuple[Any, Any]] | None:
    """`analyze_losses`' optimizers: None for one optimizer over `variables`,
    else {loss: (optimizer, its variables)} in the optimizer mapping's order."""
    mappings = [
        name
        for name, arg in (("optimizer", optimizer), ("variables", variables))
        if isinstance(arg, Mapping)
    ]
    if not mappings:
        return None
    if len(mappings) == 1:
        (given,) = mappings
        keys = sorted(optimizer if given == "optimizer" else variables)
        other = "variables" if given == "optimizer" else "optimizer"
        raise ValueError(
            f"analyze_losses: {given} is a mapping (keys {keys}) but {other} is not; pass "
            f"both as {{loss name: ...}} with the same keys, or neither"
        )
    check_loss_names(optimizer, "analyze_losses(optimizer=...)")
    if set(optimizer) != set(variables):
        raise ValueError(
            f"analyze_losses: the optimizer mapping has keys {sorted(optimizer)}, the variables "
            f"mapping {sorted(variables)} (only in optimizer: "
            f"{sorted(set(optimizer) - set(variables))}, only in variables: "
            f"{sorted(set(variables) - set(optimizer))}); give each loss its optimizer and "
            "its variables"
        )
    return {name: (optimizer[name], variables[name]) for name in optimizer}


def split_mismatch(split: Mapping[str, Any], losses: Mapping[str, Any]) -> str | None:
    """Why the losses `losses_fn` returned do not match the optimizer mapping's
    keys (one optimizer per loss), or None when they do."""
    names, keys = set(losses), set(split)
    if names == keys:
        return None
    return (
        f"analyze_losses: losses_fn returned losses {sorted(names)}, the optimizer mapping "
        f"has keys {sorted(keys)} (missing from the losses: {sorted(keys - names)}, with no "
        f"optimizer: {sorted(names - keys)}); key both mappings by the names losses_fn returns"
    )
