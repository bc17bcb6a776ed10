"""`GradscopeCallback` for `pytorch_lightning`: the class of `tb_gradscope.torch.lightning`
on the `pytorch_lightning` package's own `Callback` (a Trainer takes only its package's callbacks)."""

from __future__ import annotations

try:
    import pytorch_lightning as _pl
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError(
        "tb_gradscope.torch.pytorch_lightning needs pytorch_lightning: pip install pytorch-lightning "
        "(with the lightning package instead, import tb_gradscope.torch.lightning)"
    ) from e

from tb_gradscope.torch._lightning import LightningHooks


class GradscopeCallback(LightningHooks, _pl.Callback):
    """Records which scopes each loss updates in a pytorch_lightning run, with no change
    to the module: `tb_gradscope.torch.lightning.GradscopeCallback`, for this package."""

    tensorboard_logger = _pl.loggers.TensorBoardLogger


__all__ = ["GradscopeCallback"]
