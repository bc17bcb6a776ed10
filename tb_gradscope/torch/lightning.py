"""`GradscopeCallback`: records a Lightning (`lightning.pytorch`) training run, no code changed.

    import lightning.pytorch as L
    from tb_gradscope.torch.lightning import GradscopeCallback
    trainer = L.Trainer(callbacks=[GradscopeCallback(every_n_steps=10)])  # into the TensorBoardLogger's run
    trainer.fit(model)

`pytorch_lightning` users import the same class from
`tb_gradscope.torch.pytorch_lightning`. Imports torch and lightning, never tensorflow.
"""

from __future__ import annotations

try:
    import lightning.pytorch as _pl
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "tb_gradscope.torch.lightning needs Lightning: pip install 'tb-gradscope[lightning]' "
        "(with pytorch_lightning instead, import tb_gradscope.torch.pytorch_lightning)"
    ) from e

from tb_gradscope.torch._lightning import LightningHooks


class GradscopeCallback(LightningHooks, _pl.Callback):
    """Records which scopes each loss updates in a Lightning run, with no change to the module.

    Example:

        trainer = L.Trainer(max_epochs=1, callbacks=[GradscopeCallback(rules=["never(d_loss, generator/*)"])])
        trainer.fit(gan)   # the tab shows the run beside Lightning's scalars

    The LightningModule's direct children are the scope roots, by attribute
    (`self.generator` -> `generator/...`); the trainer's optimizers are the
    recorder's. One training batch is one step. Loss names: manual
    optimization, the variable at `self.manual_backward(g_loss)` ("g_loss");
    automatic, "loss", or one row per named part of the dict `training_step`
    returns ({"loss": a + b, "head_a": a, "head_b": b} -> "head_a", "head_b").

    Args:
      logdir: the run directory; None: the run directory of the Trainer's
        TensorBoardLogger (`trainer.logger.log_dir`), else a ValueError.
      every_n_steps: record batches s with s % every_n_steps == 0.
      rules, pairs, on_violation, conflict, scopes: as for
        `tb_gradscope.torch.Recorder`.
      losses: renames ({"g_loss": "generator"}).
    """

    tensorboard_logger = _pl.loggers.TensorBoardLogger


__all__ = ["GradscopeCallback"]
