"""GradscopeCallback for legacy tf_keras (`TF_USE_LEGACY_KERAS=1`, Keras 2 `fit`).

tf_keras, like Keras 3, builds its CallbackList before `make_train_function`
and looks `model.train_step` up when the train function is traced, so the same
wrapper works; only the Callback base class, the model class and the loss
container (`model.compiled_loss`) differ.
"""

from __future__ import annotations

import tf_keras

from tb_gradscope.integrations.keras._hooks import GradscopeHooks


class LegacyGradscopeCallback(GradscopeHooks, tf_keras.callbacks.Callback):
    """GradscopeCallback for tf_keras models (same arguments and records).

    Example:

        import os; os.environ["TF_USE_LEGACY_KERAS"] = "1"
        import tensorflow as tf
        from tb_gradscope.integrations.keras import LegacyGradscopeCallback
        model.compile("adam", loss={"q": "mse", "aux": "mse"}, loss_weights={"q": 1.0, "aux": 0.2})
        model.fit(x, y, callbacks=[LegacyGradscopeCallback("logs/run1", every_n_batches=10)])

    Args: as `tb_gradscope.integrations.keras.GradscopeCallback`.
    """

    model_types = (tf_keras.Model,)
    model_hint = "for Keras 3 models use GradscopeCallback"
