"""Record where each compiled loss's gradient flows during Keras `model.fit`.

    model.fit(x, y, callbacks=[GradscopeCallback("logs/run1")])

`GradscopeCallback`: Keras 3 with the TensorFlow backend (jax and torch are
refused with a clear error). `LegacyGradscopeCallback`: tf_keras
(`TF_USE_LEGACY_KERAS=1`), imported only when asked for.

This module's names are the package's public API; the modules beside it are
its private parts, underscored: `_hooks` (the callback's hooks), `_step` (the
instrumented train step), `_capture` (compiled losses), `_custom` (a custom
train_step's losses), `_functions` (the traced step functions), `_kernel_rng`
(kernel-held random streams), `_records` (writing), `_legacy` (tf_keras). Imported by users (and
the root's lazy `GradscopeCallback`) and `demos`; builds on `tb_gradscope.record`.
"""

from __future__ import annotations

from typing import Any

import keras

from tb_gradscope.integrations.keras._hooks import GradscopeHooks


class GradscopeCallback(GradscopeHooks, keras.callbacks.Callback):
    """Records per-output-loss gradient flow and applied updates, per scope, during `fit`.

    Example:

        inputs = keras.Input((4,))
        body = keras.layers.Dense(8, name="body")(inputs)
        q = keras.layers.Dense(1, name="q")(body)
        aux = keras.layers.Dense(1, name="aux")(body)
        model = keras.Model(inputs, {"q": q, "aux": aux}, name="agent")
        model.compile("sgd", loss={"q": "mse", "aux": "mse"},
                      loss_weights={"q": 1.0, "aux": 0.2})
        model.fit(x, {"q": y, "aux": y2}, epochs=2,
                  callbacks=[GradscopeCallback("logs/run1", every_n_batches=10)])
        # then: tensorboard --logdir logs  ->  the "Gradscope" tab

    Each compiled output loss is a gradscope loss named as Keras names it
    (`q`, `aux`); what is recorded is the *weighted* loss (`loss_weight *
    loss`, the output's term in the total Keras differentiates), and each
    record's metadata says so (`attrs`: `weighted`, `loss_weight`). Each
    term a layer adds with `add_loss` is a loss of its own, named after the
    layer and the name its code holds the term under (`vq/commitment_loss`);
    weight regularizers are not attributed. Applied
    updates are each scope's ||delta theta|| over the recorded step; the
    step's graph is analyzed once (blocked edges with source lines).

    The model's own `train_step` runs unchanged: the callback wraps it (before
    Keras compiles its train function) in an outer GradientTape that only
    watches, so the weights trained with and without the callback are bitwise
    identical. Works with `jit_compile` on or off and with
    `steps_per_execution > 1` (every recorded batch is the one trained on).
    The wrapper stays on the model between fits with this callback (no
    retracing) and is switched off outside them; `detach()` removes it.
    Errors inside the callback are reported once and recording stops; `fit`
    goes on.

    Args:
      logdir: directory for the event file (e.g. the TensorBoard run folder).
      every_n_batches: record the batches whose optimizer step
        (`optimizer.iterations` before the update) is divisible by this.
      scopes: a `tb_gradscope.scopes.ScopeSpec` (include, exclude, max_depth)
        for the scope tree; the model's name is its root.
      rules: flow rules (`tb_gradscope.rules` objects or strings such as
        "never(q, agent/aux*)"), checked on the step's FlowGraph and at every
        recorded step; violations are written as EVENTS records.
      on_violation: "log" (default), "warn", or "raise" (FlowRuleViolation
        stops fit, after the violations are written).
      pairs: target/online `tb_gradscope.pairs.Pair`s (`pair_models(target,
        model, tau=...)`) whose drift is recorded (DRIFT records), read
        between batches, after other callbacks' target updates; needs
        `steps_per_execution=1` (drift compares a step with the one before).
      grad_columns: the optional gradient columns recorded, from ("max_abs",
        "zero_frac") (default both); one left out is not computed and reads
        NaN, "not recorded" (as `Recorder(grad_columns=...)`).
      variables: extra variables to record beside the model's, such as a
        `tf.Variable` a layer holds that Keras 3 does not track (the callback
        warns about those it finds); named `<model>/<layer>/<variable>`.
    """

    model_types = (keras.Model,)
    model_hint = "for tf_keras (TF_USE_LEGACY_KERAS=1) use LegacyGradscopeCallback"
    host_schedule = True

    @staticmethod
    def check_environment() -> None:
        _check_backend(keras.backend.backend())


def _check_backend(backend: str) -> None:
    """Raises unless `backend` (keras.backend.backend()) is TensorFlow."""
    if backend != "tensorflow":
        raise ValueError(
            f"GradscopeCallback records TensorFlow training only, but Keras "
            f"runs on the '{backend}' backend; set KERAS_BACKEND=tensorflow "
            "before importing keras (jax and torch are not supported)"
        )


def __getattr__(name: str) -> Any:
    if name == "LegacyGradscopeCallback":  # imports tf_keras: only when asked for
        from tb_gradscope.integrations.keras._legacy import LegacyGradscopeCallback

        return LegacyGradscopeCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["GradscopeCallback", "LegacyGradscopeCallback"]
