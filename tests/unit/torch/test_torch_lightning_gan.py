"""`tb_gradscope.torch.lightning.GradscopeCallback` on a real Lightning GAN with manual
optimization (two optimizers, `manual_backward`): each loss is named by its
call site and gets its row; g_loss updates the generator and reaches the
discriminator without being applied there; d_loss updates the discriminator
and is blocked at the line that detaches the fake images; `doctor` says so;
training is bitwise the same without the callback."""

from __future__ import annotations

import argparse
import inspect
import io
import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tb_gradscope import format as fmt
from tb_gradscope.commands import doctor
from tb_gradscope.read.logdir import load_logdir

pytest.importorskip("lightning.pytorch")  # a venv of torch alone has no Lightning

import lightning.pytorch as L  # noqa: E402
from lightning.pytorch.loggers import TensorBoardLogger  # noqa: E402

from tb_gradscope.torch.lightning import GradscopeCallback  # noqa: E402
from tests.support.lightning_trainer import quiet_trainer  # noqa: E402

pytestmark = pytest.mark.slow

BATCHES = 5


class GAN(L.LightningModule):
    """leaky=True: d_loss takes fake images that are not detached, and the
    discriminator's optimizer holds every parameter: d_loss trains the generator."""

    def __init__(self, leaky: bool = False):
        super().__init__()
        self.leaky = leaky
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
        self.discriminator = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_g, opt_d = self.optimizers()
        z = torch.randn(real.shape[0], 4)
        fake = self.generator(z)
        ones, zeros = torch.ones(real.shape[0], 1), torch.zeros(real.shape[0], 1)

        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()

        if self.leaky:
            fake = self.generator(z)  # the generator's forward again, not detached
        else:
            fake = fake.detach()  # the discriminator's step does not train the generator
        d_loss = F.binary_cross_entropy_with_logits(
            self.discriminator(real), ones
        ) + F.binary_cross_entropy_with_logits(self.discriminator(fake), zeros)
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        self.log_dict({"g_loss": g_loss, "d_loss": d_loss})

    def configure_optimizers(self):
        return (
            torch.optim.Adam(self.generator.parameters(), 2e-3),
            torch.optim.Adam((self if self.leaky else self.discriminator).parameters(), 2e-3),
        )


def _detach_line() -> int:
    lines, first = inspect.getsourcelines(GAN.training_step)
    (k,) = [k for k, line in enumerate(lines) if "fake.detach()" in line]
    return first + k


def _fit(logger, callbacks=(), leaky: bool = False) -> GAN:
    torch.manual_seed(0)
    model = GAN(leaky)
    real = torch.randn(BATCHES * 8, 8, generator=torch.Generator().manual_seed(1)) + 2.0
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(real), batch_size=8)
    quiet_trainer(logger, callbacks).fit(model, data)
    return model


@pytest.fixture(scope="module")
def gan(tmp_path_factory):
    root = tmp_path_factory.mktemp("lightning_gan")
    logger = TensorBoardLogger(str(root), name="gan", version=0)
    model = _fit(logger, [GradscopeCallback(every_n_steps=2)])
    (run,) = load_logdir(logger.log_dir)
    return root, model, run


def test_each_manual_backward_is_a_loss_named_by_its_call_site(gan):
    *_, run = gan
    assert sorted(run.grads) == [0, 2, 4]  # one batch, one step: both losses in each
    assert all(set(tables) == {"g_loss", "d_loss"} for tables in run.grads.values())


def test_g_loss_updates_the_generator_and_is_not_applied_to_the_discriminator(gan):
    *_, run = gan
    cells = run.flowgraph.cells["g_loss"]
    assert cells["generator"] == fmt.UPDATES
    assert cells["discriminator"] == fmt.IGNORED  # reached, then opt_d.zero_grad() drops it


def test_d_loss_updates_the_discriminator_and_is_blocked_at_the_detach_line(gan):
    *_, run = gan
    cells = run.flowgraph.cells["d_loss"]
    assert cells["discriminator"] == fmt.UPDATES
    assert cells["generator"] == fmt.BLOCKED
    edges = [e for e in run.flowgraph.blocked_edges if e.loss == "d_loss"]
    assert {e.producer_scope for e in edges} == {"generator/0", "generator/2"}
    for edge in edges:
        assert (edge.cause, edge.op_type) == ("stop_gradient", "Tensor.detach")
        assert edge.source.file.endswith("test_torch_lightning_gan.py")
        assert edge.source.line == _detach_line()


def _doctor(logdir):
    out, err = io.StringIO(), io.StringIO()
    code = doctor.run(
        argparse.Namespace(logdir=str(logdir), run_name=None, format="json"), out=out, err=err
    )
    (entry,) = json.loads(out.getvalue())["runs"]
    return code, entry["findings"]


def test_doctor_is_silent_on_the_gan(gan):
    root, *_ = gan
    assert _doctor(root) == (0, [])


def test_doctor_finds_the_leaky_gan_whose_d_loss_trains_the_generator(tmp_path):
    _fit(TensorBoardLogger(str(tmp_path), name="leaky", version=0), [GradscopeCallback()], True)
    code, findings = _doctor(tmp_path)
    (finding,) = findings
    assert code == 1
    assert (finding["loss"], finding["scope"]) == ("d_loss", "generator")
    assert finding["rule"] == "never(d_loss, generator/*)"


def test_training_with_the_callback_is_bitwise_training_without(gan, tmp_path):
    _, recorded, run = gan
    assert run.grad_steps
    plain = _fit(TensorBoardLogger(str(tmp_path), name="plain", version=0))
    for (name, a), (_, b) in zip(plain.named_parameters(), recorded.named_parameters()):
        assert torch.equal(a, b), name
