"""Mixed precision: under autocast and a GradScaler the recorded norms are the
unscaled gradients', a step the scaler skips is a SKIPPED event, and autocast
changes no flow state.

The oracle is the same loop without a scaler: scaling by a power of two and
unscaling by its reciprocal are exact, so the scaled run trains bitwise as the
unscaled one that skips the overflowing step too, and its recorded norms are
the unscaled run's.
"""

from __future__ import annotations

import copy
import io
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tb_gradscope import format as fmt
from tb_gradscope.commands import build_parser
from tb_gradscope.core.loss_scale import OVERFLOW, SKIPPED_RECORD
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import Recorder, pair_models
from tests.support.providers import read_records
from tests.support.torch_loops import mlp

STEPS = 9
OVERFLOW_AT = 4  # the step whose loss is multiplied to inf


def amp_dqn(logdir, scaled: bool, aux: bool = False, dtype=torch.bfloat16):
    """A DQN step under CPU autocast; with `scaled`, through a GradScaler (the
    loss at OVERFLOW_AT is inf: the scaler skips it); without, the loop skips
    that step's optimizer step itself. `aux`: a second loss (the batched path)."""
    torch.manual_seed(0)
    q = mlp(4, 8, 2)
    q_target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), 1e-2)
    scaler = torch.amp.GradScaler("cpu") if scaled else None
    rec = Recorder(
        logdir,
        every_n_steps=1,
        models={"online": q, "target": q_target},
        optimizers=[opt],
        pairs=[pair_models(q_target, q, every=100)],
        grad_scaler=scaler,
    )
    for step in range(STEPS):
        s, s2 = torch.randn(2, 16, 4)
        a, r = torch.randint(0, 2, (16,)), torch.randn(16)
        with torch.autocast("cpu", dtype=dtype):
            with torch.no_grad():
                y = r + 0.99 * q_target(s2).max(1).values
            q_all = q(s)
            losses = {"td": F.mse_loss(q_all.gather(1, a[:, None]).squeeze(1).float(), y.float())}
            if aux:
                losses["aux"] = 1e-2 * q_all.float().square().mean()
        if step == OVERFLOW_AT:
            losses = {name: loss * float("inf") for name, loss in losses.items()}
        opt.zero_grad()
        if scaled:
            rec.backward({name: scaler.scale(loss) for name, loss in losses.items()})
            scaler.step(opt)
            scaler.update()
        else:
            rec.backward(losses)
            if step != OVERFLOW_AT:
                opt.step()
    rec.close()
    return [p.detach().clone() for p in q.parameters()], scaler


@pytest.fixture(scope="module", params=[False, True], ids=["one_loss", "two_losses"])
def runs(request, tmp_path_factory):
    """The scaled run, its scaler and logdir, the unscaled oracle run, and
    whether they trained bitwise alike."""
    base = tmp_path_factory.mktemp("amp")
    scaled_params, scaler = amp_dqn(base / "scaled", True, aux=request.param)
    plain_params, _ = amp_dqn(base / "plain", False, aux=request.param)
    (scaled,) = load_logdir(str(base / "scaled"))
    (plain,) = load_logdir(str(base / "plain"))
    same = all(torch.equal(a, b) for a, b in zip(scaled_params, plain_params))
    return types.SimpleNamespace(
        scaled=scaled, scaler=scaler, plain=plain, same=same, logdir=str(base / "scaled")
    )


def test_the_scaled_run_trains_bitwise_as_the_unscaled_one(runs):
    assert runs.same
    assert runs.scaler.get_scale() == 2.0**15  # the overflow halved 2**16 once


def test_recorded_norms_are_the_unscaled_gradients_norms(runs):
    scaled, plain = runs.scaled, runs.plain
    steps = [s for s in range(STEPS) if s != OVERFLOW_AT]
    assert scaled.grad_steps == steps
    for step in steps:
        for name, table in plain.grads[step].items():
            got = scaled.grads[step][name]
            assert got.row("online")["l2"] > 0
            # The scale is 2**16 before the overflow, 2**15 after: each divided by its own.
            np.testing.assert_allclose(got.values, table.values, rtol=1e-6, err_msg=(step, name))


def test_a_step_the_scaler_skips_is_a_skipped_event_not_tables(runs):
    scaled, plain = runs.scaled, runs.plain
    (event,) = [e for e in scaled.events if e.type == fmt.SKIPPED]
    assert event.step == OVERFLOW_AT and event.name == OVERFLOW
    assert event.evidence == {"loss_scale": 2.0**16, "skipped_batches": 1}
    assert "halved the scale" in event.message
    assert OVERFLOW_AT not in scaled.grads
    assert not any(step == OVERFLOW_AT for pair in scaled.cosines.values() for step, _ in pair)
    # The oracle, without a scaler, records the overflow as non-finite gradients.
    assert plain.grads[OVERFLOW_AT]["td"].row("online")["nonfinite"] > 0
    # No update was applied at the skipped step, and the update table says so.
    assert scaled.updates[OVERFLOW_AT].row("online")["update_norm"] == 0
    assert scaled.updates[OVERFLOW_AT + 1].row("online")["update_norm"] > 0


def test_the_skipped_event_is_in_the_record_the_tf_recorders_use_and_report_lists_it(runs):
    (records,) = read_records(runs.logdir).values()
    (doc,) = records[(fmt.Kind.EVENTS, SKIPPED_RECORD)][OVERFLOW_AT]
    assert fmt.Event.from_json(doc).type == fmt.SKIPPED
    args = build_parser().parse_args(["report", runs.logdir])
    out = io.StringIO()
    assert args.run(args, out, io.StringIO()) == 0
    section = out.getvalue().split("steps skipped by the loss scaler (mixed precision):\n")[1]
    assert f"step {OVERFLOW_AT}  {OVERFLOW}" in section.split("\n\n")[0]


def test_a_disabled_scaler_scales_nothing_and_the_norms_are_as_given(tmp_path):
    torch.manual_seed(0)
    net = mlp(3, 4, 1)
    opt = torch.optim.SGD(net.parameters(), 0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    with Recorder(tmp_path, every_n_steps=1, models={"net": net}, grad_scaler=scaler) as rec:
        x = torch.randn(8, 3)
        loss = net(x).square().mean()
        opt.zero_grad()
        rec.backward({"mse": scaler.scale(loss)})
        scaler.step(opt)
        scaler.update()
    (run,) = load_logdir(str(tmp_path))
    norm = torch.cat([p.grad.reshape(-1) for p in net.parameters()]).norm().item()
    assert run.grads[0]["mse"].row("net")["l2"] == pytest.approx(norm, rel=1e-6)


def test_grad_scaler_must_be_a_grad_scaler(tmp_path):
    with pytest.raises(TypeError, match="torch.amp.GradScaler"):
        Recorder(tmp_path, models={"net": mlp(2, 1)}, grad_scaler=2.0**16)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_autocast_changes_no_flow_state(dtype, tmp_path):
    """The FlowGraph under autocast is the fp32 run's: same cells, same cuts."""

    def flowgraph(logdir, autocast):
        torch.manual_seed(0)
        encoder, head, frozen = mlp(4, 8), mlp(8, 2), mlp(4, 8).requires_grad_(False)
        opt = torch.optim.SGD([*encoder.parameters(), *head.parameters()], 0.1)
        with Recorder(
            logdir,
            every_n_steps=1,
            models={"encoder": encoder, "head": head, "frozen": frozen},
            optimizers=[opt],
        ) as rec:
            for _ in range(2):
                x = torch.randn(8, 4)
                with torch.autocast("cpu", dtype=dtype, enabled=autocast):
                    h = encoder(x)
                    out = head(h.detach() + frozen(x)) + head(h).argmax(1, keepdim=True)
                    with torch.no_grad():
                        baseline = head(encoder(x)).mean()
                    loss = (out.float() - baseline).square().mean()
                opt.zero_grad()
                rec.backward({"loss": loss})
                opt.step()
        (run,) = load_logdir(str(logdir))
        return run.flowgraph

    plain, cast = flowgraph(tmp_path / "fp32", False), flowgraph(tmp_path / "amp", True)
    assert cast.cells == plain.cells
    assert plain.state("loss", "encoder") == fmt.BLOCKED
    assert plain.state("loss", "frozen") == fmt.BLOCKED
    assert plain.state("loss", "head") == fmt.UPDATES

    def cuts(graph):
        return sorted((e.producer_scope, e.cause, e.op_type) for e in graph.blocked_edges)

    assert cuts(cast) == cuts(plain) and cuts(plain)
