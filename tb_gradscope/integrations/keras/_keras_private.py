"""Every private Keras symbol the callback uses, each behind one small function.

Keras offers no public way to the loss tensor of each compiled output: only its
loss container computes them, and sums them in the same call. So the callback
reads and replaces the container's per-output loss functions (`capture.py`).
Everything else it needs is public (`make_train_function`, `train_function`,
`train_step`, `steps_per_execution`, `metrics`). A Keras upgrade that moves one of
these symbols fails here, and in tests/test_keras_private.py, which touches each.
"""

from __future__ import annotations

from typing import Any, Callable

# ----- Keras 3 -------------------------------------------------------------


def compile_loss(model: Any) -> Any:
    """The model's CompileLoss (`model.compile(loss=...)`), or None."""
    return getattr(model, "_compile_loss", None)


def has_flat_losses(container: Any) -> bool:
    """Whether `container` is a CompileLoss holding (or to hold) per-output entries."""
    return hasattr(container, "_flat_losses")


def flat_losses(container: Any) -> list[Any] | None:
    """A CompileLoss's per-output entries (path, loss, loss_weights, name); None before it is built."""
    return container._flat_losses  # noqa: SLF001 - the only way to each output's loss


def set_flat_losses(container: Any, entries: list[Any] | None) -> None:
    """Replaces a CompileLoss's per-output entries (restored with what flat_losses returned)."""
    container._flat_losses = entries  # noqa: SLF001


def with_loss_fn(entry: Any, loss_fn: Callable[..., Any]) -> Any:
    """A CompileLoss entry with another loss function (entries are namedtuples)."""
    return entry._replace(loss=loss_fn)


# ----- tf_keras (TF_USE_LEGACY_KERAS=1) --------------------------------------


def legacy_loss_functions(container: Any) -> list[Any] | None:
    """A tf_keras LossesContainer's per-output loss objects (aligned with its output names)."""
    return getattr(container, "_losses", None)


def legacy_set_loss_functions(container: Any, losses: list[Any] | None) -> None:
    container._losses = losses  # noqa: SLF001


def legacy_is_loss_container(container: Any) -> bool:
    """Whether `container` (tf_keras `model.compiled_loss`) is a LossesContainer."""
    return hasattr(container, "_losses") and hasattr(container, "_built")


def legacy_built(container: Any) -> bool:
    return bool(container._built)  # noqa: SLF001


def legacy_output_names(container: Any) -> list[str]:
    return list(getattr(container, "_output_names", None) or [])


def legacy_loss_weights(container: Any) -> list[Any]:
    return list(getattr(container, "_loss_weights", None) or [])


def legacy_steps_per_execution(model: Any) -> Any:
    """tf_keras keeps steps_per_execution in a private variable (Keras 3: a public int)."""
    return getattr(model, "_steps_per_execution", None)
