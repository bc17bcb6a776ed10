"""`tb_gradscope.torch.lightning.GradscopeCallback` on real Lightning runs, automatic
optimization: a multi-head model whose `training_step` returns a dict of named
losses gets one row per head, written into the run of Lightning's own
TensorBoardLogger; training is bitwise the same without the callback; an
error in training closes the run and leaves the module as it was."""

from __future__ import annotations

import argparse
import io
import json
import os
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tb_gradscope import format as fmt
from tb_gradscope.commands import doctor
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import GradscopeWarning

pytest.importorskip("lightning.pytorch")  # a venv of torch alone has no Lightning

import lightning.pytorch as L  # noqa: E402
from lightning.pytorch.loggers import TensorBoardLogger  # noqa: E402

from tb_gradscope.torch import _lightning as lightning_hooks  # noqa: E402
from tb_gradscope.torch.lightning import GradscopeCallback  # noqa: E402
from tests.support.lightning_trainer import quiet_trainer  # noqa: E402

pytestmark = pytest.mark.slow

BATCHES = 6


class MultiHead(L.LightningModule):
    """A shared backbone and two heads, one loss each; their sum trains all three."""

    def __init__(self, fail_at: int | None = None, fail_in: str = "step"):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head_a = nn.Linear(16, 1)
        self.head_b = nn.Linear(16, 3)
        self.fail_at, self.fail_in = fail_at, fail_in

    def training_step(self, batch, batch_idx):
        failing = batch_idx == self.fail_at
        if failing and self.fail_in == "step":
            raise RuntimeError("injected failure")
        x, y_a, y_b = batch
        h = self.backbone(x)
        if failing:  # in the backward, when its gradient reaches h
            h.register_hook(lambda grad: _raise(RuntimeError("injected failure")))
        head_a = F.mse_loss(self.head_a(h).squeeze(1), y_a)
        head_b = F.cross_entropy(self.head_b(h), y_b)
        self.log("train_loss", head_a + head_b)
        if failing:  # one loss: the recorder hooks the parameters for the backward
            return head_a + head_b
        return {"loss": head_a + head_b, "head_a": head_a, "head_b": head_b}

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), 1e-2)


def _raise(error: Exception):
    raise error


def _data() -> torch.utils.data.DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(BATCHES * 8, 8, generator=g)
    y_a = torch.randn(BATCHES * 8, generator=g)
    y_b = torch.randint(0, 3, (BATCHES * 8,), generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y_a, y_b), batch_size=8)


def _fit(logger, callbacks=(), **model_kw) -> MultiHead:
    torch.manual_seed(0)
    model = MultiHead(**model_kw)
    quiet_trainer(logger, callbacks).fit(model, _data())
    return model


@pytest.fixture(scope="module")
def multihead(tmp_path_factory):
    """One recorded run into the TensorBoardLogger's run directory, and the run read back."""
    root = tmp_path_factory.mktemp("lightning_multihead")
    logger = TensorBoardLogger(str(root), name="multihead", version=0)
    model = _fit(logger, [GradscopeCallback(every_n_steps=1)])
    (run,) = load_logdir(logger.log_dir)
    return root, logger.log_dir, model, run


def _doctor(logdir):
    out, err = io.StringIO(), io.StringIO()
    code = doctor.run(
        argparse.Namespace(logdir=str(logdir), run_name=None, format="json"), out=out, err=err
    )
    return code, json.loads(out.getvalue())


def test_each_named_loss_of_the_dict_gets_its_row(multihead):
    *_, run = multihead
    assert sorted(run.grads) == list(range(BATCHES))  # one training batch, one step
    assert all(set(tables) == {"head_a", "head_b"} for tables in run.grads.values())


def test_each_head_updates_its_head_and_the_backbone_and_not_the_other_head(multihead):
    *_, run = multihead
    cells = run.flowgraph.cells
    assert cells["head_a"]["backbone"] == cells["head_a"]["head_a"] == fmt.UPDATES
    assert cells["head_b"]["backbone"] == cells["head_b"]["head_b"] == fmt.UPDATES
    assert cells["head_a"]["head_b"] == cells["head_b"]["head_a"] == fmt.INDEPENDENT


def test_the_run_is_the_tensorboard_loggers_own_run(multihead):
    root, log_dir, _, _ = multihead
    assert log_dir == os.path.join(str(root), "multihead", "version_0")
    events = [f for f in os.listdir(log_dir) if f.startswith("events.out.tfevents")]
    assert len(events) == 2  # Lightning's scalars and the gradscope records, one run
    runs = load_logdir(str(root))
    assert [r.run for r in runs] == ["multihead/version_0"]


def test_doctor_is_silent_on_the_multihead_run(multihead):
    root, *_ = multihead
    code, report = _doctor(root)
    assert code == 0
    assert [r["findings"] for r in report["runs"]] == [[]]


def test_training_with_the_callback_is_bitwise_training_without(multihead, tmp_path):
    *_, recorded, run = multihead
    assert run.grad_steps  # the callback did record
    plain = _fit(TensorBoardLogger(str(tmp_path), name="plain", version=0))
    for (name, a), (_, b) in zip(plain.named_parameters(), recorded.named_parameters()):
        assert torch.equal(a, b), name


def test_the_training_step_wrapper_is_gone_after_fit(multihead):
    _, _, model, _ = multihead
    assert "training_step" not in vars(model)


def test_no_logdir_and_no_tensorboard_logger_is_a_clear_error(tmp_path):
    with pytest.raises(
        ValueError, match="no logdir given and the Trainer has no TensorBoardLogger"
    ):
        _fit(False, [GradscopeCallback()])


@pytest.mark.parametrize("fail_in", ["step", "backward"])
def test_an_error_in_training_closes_the_run_and_restores_the_module(tmp_path, fail_in):
    torch.manual_seed(0)
    model = MultiHead(fail_at=2, fail_in=fail_in)
    callback = GradscopeCallback(tmp_path / "failed", every_n_steps=1)
    with (
        warnings.catch_warnings(record=True) as seen,
        pytest.raises(RuntimeError, match="injected"),
    ):
        warnings.simplefilter("always")
        quiet_trainer(False, [callback]).fit(model, _data())
    assert not [w for w in seen if issubclass(w.category, GradscopeWarning)]  # training's error
    assert callback.recorder is None and "training_step" not in vars(model)
    assert not any(p._backward_hooks for p in model.parameters())  # the backward's hooks gone
    (run,) = load_logdir(str(tmp_path / "failed"))
    assert sorted(run.grads) == [0, 1]  # the two batches before the failure, written


def test_a_failure_inside_the_callback_warns_once_and_training_goes_on(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("injected")

    monkeypatch.setattr(lightning_hooks, "named_parts", broken)
    callback = GradscopeCallback(tmp_path, every_n_steps=1)
    with pytest.warns(
        GradscopeWarning, match=r"stopped recording .*RuntimeError: injected"
    ) as seen:
        model = _fit(False, [callback])
    assert len([w for w in seen if issubclass(w.category, GradscopeWarning)]) == 1
    assert callback.recorder is None and "training_step" not in vars(model)
    assert model.trainer.global_step == BATCHES  # every batch trained


def test_renamed_losses(tmp_path):
    _fit(False, [GradscopeCallback(tmp_path, every_n_steps=3, losses={"head_a": "regression"})])
    (run,) = load_logdir(str(tmp_path))
    assert sorted(run.grads) == [0, 3]
    assert set(run.grads[0]) == {"regression", "head_b"}


class Weighted(L.LightningModule):
    """One loss `fit`; the total is `weight * fit`, with or without the dict naming `fit`."""

    def __init__(self, weight: float, named: bool):
        super().__init__()
        self.net = nn.Linear(8, 1)
        self.weight, self.named = weight, named

    def training_step(self, batch, batch_idx):
        x, y, _ = batch
        fit = F.mse_loss(self.net(x).squeeze(1), y)
        return {"loss": self.weight * fit, "fit": fit} if self.named else fit

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), 0.1)


def _first_row(tmp_path, name, **kw):
    torch.manual_seed(0)
    callback = GradscopeCallback(tmp_path / name, every_n_steps=1)
    quiet_trainer(False, [callback]).fit(Weighted(**kw), _data())
    (run,) = load_logdir(str(tmp_path / name))
    (table,) = run.grads[0].values()
    return table.values


def test_a_single_named_part_is_its_own_gradient_not_the_backwards(tmp_path):
    alone = _first_row(tmp_path, "alone", weight=1.0, named=False)
    part = _first_row(tmp_path, "part", weight=3.0, named=True)  # the backward: 3 x fit's
    assert alone.any()
    assert alone.tobytes() == part.tobytes()


def test_pytorch_lightning_users_import_the_callback_of_their_package(tmp_path):
    import pytorch_lightning as pl

    from tb_gradscope.torch.pytorch_lightning import GradscopeCallback as PLCallback

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = nn.Linear(8, 1)

        def training_step(self, batch, batch_idx):
            x, y, _ = batch
            return F.mse_loss(self.net(x).squeeze(1), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), 0.1)

    assert issubclass(PLCallback, pl.Callback) and not issubclass(PLCallback, L.Callback)
    logger = pl.loggers.TensorBoardLogger(str(tmp_path), name="pl", version=0)
    pl.Trainer(
        max_steps=2,
        accelerator="cpu",
        logger=logger,
        callbacks=[PLCallback(every_n_steps=1)],
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
    ).fit(Regression(), _data())
    (run,) = load_logdir(logger.log_dir)
    assert {step: set(tables) for step, tables in run.grads.items()} == {0: {"loss"}, 1: {"loss"}}
    assert run.flowgraph.cells["loss"]["net"] == fmt.UPDATES


class EpochEndFit(L.LightningModule):
    """Manual optimization; one more backward at the epoch's end, outside every batch."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.net = nn.Linear(8, 1)

    def training_step(self, batch, batch_idx):
        x, y, _ = batch
        fit = F.mse_loss(self.net(x).squeeze(1), y)
        self.manual_backward(fit)
        self.optimizers().step()
        self.optimizers().zero_grad()

    def on_train_epoch_end(self):
        anchor = self.net.weight.pow(2).sum()
        self.manual_backward(anchor)
        self.optimizers().step()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), 0.01)


def test_a_backward_outside_every_batch_is_a_step_of_its_own_named_by_its_call_site(tmp_path):
    torch.manual_seed(0)
    trainer = quiet_trainer(False, [GradscopeCallback(tmp_path, every_n_steps=2)])
    trainer.fit(EpochEndFit(), _data())  # batches: steps 0..5; the epoch's end: step 6
    (run,) = load_logdir(str(tmp_path))
    assert {s: set(t) for s, t in run.grads.items()} == {
        0: {"fit"},
        2: {"fit"},
        4: {"fit"},
        6: {"anchor"},
    }
