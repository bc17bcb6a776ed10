"""A quiet one-epoch Lightning `Trainer` on the CPU, shared by the Lightning tests.

Import it after `pytest.importorskip("lightning.pytorch")`: a venv of torch
alone has no Lightning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import lightning.pytorch as L


def quiet_trainer(logger: Any, callbacks: Sequence[L.Callback] = ()) -> L.Trainer:
    """One epoch on one CPU device, no progress bar, summary or checkpoint;
    logs at every step (`logger`: a Lightning logger, or False for none)."""
    return L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=logger,
        callbacks=list(callbacks),
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        log_every_n_steps=1,
    )
