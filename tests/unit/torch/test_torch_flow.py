"""Flow analysis from PyTorch's own structures: each cut named with its cause and
the user's line, param groups decide updates vs ignored, custom Functions and
start points too. One step each, tiny models, read back through the readers."""

from __future__ import annotations

import sys

import pytest
import torch
from torch import nn

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import Recorder, StartPoint
from tests.support.torch_loops import mlp


def _line() -> int:
    """The line of the caller (the line that makes the cut)."""
    return sys._getframe(1).f_lineno


def _one_step(tmp_path, models, forward, optimizers=None, steps=1):
    """Runs `forward()` -> {loss: tensor}, a recorded backward and the optimizers'
    steps; returns the run read back."""
    optimizers = optimizers if optimizers is not None else []
    rec = Recorder(tmp_path, every_n_steps=1, models=models, optimizers=optimizers)
    for _ in range(steps):
        losses, *_ = forward()
        for opt in optimizers:
            opt.zero_grad()
        rec.backward(losses)
        for opt in optimizers:
            opt.step()
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    return run


def _edge(run, loss, scope):
    (edge,) = [
        e for e in run.flowgraph.blocked_edges if e.loss == loss and e.producer_scope == scope
    ]
    return edge


@pytest.fixture
def nets():
    torch.manual_seed(0)
    return {"online": mlp(3, 4, 1), "target": mlp(3, 4, 1)}


def test_detach_blocks_the_target_and_names_its_line(tmp_path, nets):
    x = torch.randn(5, 3)

    def forward():
        y, line = nets["target"](x).detach(), _line()
        return {"td": (nets["online"](x) - y).pow(2).mean()}, line

    line = forward()[1]
    run = _one_step(tmp_path, nets, forward)
    assert run.flowgraph.cells["td"]["target"] == fmt.BLOCKED
    edge = _edge(run, "td", "target/2")
    assert (edge.cause, edge.op_type) == ("stop_gradient", "Tensor.detach")
    assert edge.source.line == line and edge.source.file.endswith("test_torch_flow.py")
    assert edge.consumer_scope == "loss:td"


def test_data_blocks_the_target(tmp_path, nets):
    x = torch.randn(5, 3)

    def forward():
        y, line = nets["target"](x).data, _line()
        return {"td": (nets["online"](x) - y).pow(2).mean()}, line

    line = forward()[1]
    edge = _edge(_one_step(tmp_path, nets, forward), "td", "target/2")
    assert (edge.cause, edge.op_type, edge.source.line) == ("stop_gradient", "Tensor.data", line)


def test_no_grad_and_inference_mode_block(tmp_path, nets):
    x = torch.randn(5, 3)

    def forward():
        with_line = _line() + 1  # the region's cut names the line that switched gradients off
        with torch.inference_mode():
            y = nets["target"](x)
        return {"td": (nets["online"](x) - y.clone()).pow(2).mean()}, with_line

    line = forward()[1]
    edge = _edge(_one_step(tmp_path, nets, forward), "td", "target/0")
    assert (edge.cause, edge.op_type, edge.source.line) == ("stop_gradient", "inference_mode", line)


def test_argmax_is_non_differentiable_and_an_integer_cast_is_integer(tmp_path):
    torch.manual_seed(1)
    models = {"policy": mlp(3, 2), "critic": mlp(3, 1), "online": mlp(3, 1)}
    x = torch.randn(6, 3)

    def forward():
        picked, argmax_line = models["policy"](x).argmax(1).float(), _line()
        rounded, cast_line = models["critic"](x).long().float(), _line()
        out = models["online"](x).squeeze(1)
        return {"a": (out * picked).mean() + (out * rounded).mean()}, argmax_line, cast_line

    _, argmax_line, cast_line = forward()
    run = _one_step(tmp_path, models, forward)
    assert run.flowgraph.cells["a"]["online"] == fmt.UPDATES
    policy, critic = _edge(run, "a", "policy/0"), _edge(run, "a", "critic/0")
    assert (policy.cause, policy.op_type, policy.source.line) == (
        "non_differentiable",
        "Tensor.argmax",
        argmax_line,
    )
    assert (critic.cause, critic.op_type, critic.source.line) == (
        "integer",
        "Tensor.long",
        cast_line,
    )


def test_an_item_value_reentering_as_a_constant_is_non_differentiable(tmp_path, nets):
    x = torch.randn(5, 3)

    def forward():
        scale, line = nets["target"](x).mean().item(), _line()
        return {"td": nets["online"](x).mean() * scale}, line

    line = forward()[1]
    edge = _edge(_one_step(tmp_path, nets, forward), "td", "target/2")
    assert (edge.cause, edge.op_type, edge.source.line) == (
        "non_differentiable",
        "Tensor.item",
        line,
    )


def test_a_frozen_parameter_is_blocked_as_autograd_does_not_watch_it(tmp_path, nets):
    for p in nets["target"].parameters():
        p.requires_grad_(False)
    x = torch.randn(5, 3)
    run = _one_step(
        tmp_path, nets, lambda: ({"td": (nets["online"](x) - nets["target"](x)).pow(2).mean()},)
    )
    assert run.flowgraph.cells["td"]["target"] == fmt.BLOCKED
    edge = _edge(run, "td", "target/0")
    assert (edge.cause, edge.op_type) == ("tape_boundary", "requires_grad=False")
    assert run.flowgraph.trainable["target"] == "not_trainable"
    assert run.flowgraph.trainable["online"] == "trainable"


def test_a_reached_parameter_in_no_param_group_is_ignored(tmp_path, nets):
    x = torch.randn(5, 3)
    opt = torch.optim.SGD(nets["online"][0].parameters(), 0.1)  # layer 0 only
    run = _one_step(tmp_path, nets, lambda: ({"td": nets["online"](x).pow(2).mean()},), [opt])
    cells = run.flowgraph.cells["td"]
    assert (cells["online/0"], cells["online/2"], cells["target"]) == (
        fmt.UPDATES,
        fmt.IGNORED,
        fmt.INDEPENDENT,
    )
    assert run.flowgraph.applied == ["online", "online/0"]
    assert run.flowgraph.losses[0].optimizer == "opt0"


def test_a_custom_function_returning_none_is_named(tmp_path, nets):
    class Straight(torch.autograd.Function):
        @staticmethod
        def forward(ctx, v):
            return v * 2

        @staticmethod
        def backward(ctx, g):
            return None

    x = torch.randn(5, 3)
    run = _one_step(
        tmp_path,
        nets,
        lambda: ({"td": Straight.apply(nets["target"](x)).mean() + nets["online"](x).mean()},),
    )
    assert run.flowgraph.cells["td"]["target"] == fmt.BLOCKED
    edge = _edge(run, "td", "target/2")
    assert (edge.cause, edge.op_type) == ("custom_gradient_none", "StraightBackward")
    assert run.grads[0]["td"].row("target")["grad_vars"] == 0


def test_a_start_point_records_the_gradient_started_inside_the_model(tmp_path):
    torch.manual_seed(2)
    q = mlp(3, 4, 2)
    x = torch.randn(5, 3)
    targets = torch.randn(5, 2)
    rec = Recorder(tmp_path, every_n_steps=1, models={"q": q})
    q_all = q(x)
    expected = torch.autograd.grad(
        q_all, list(q.parameters()), grad_outputs=targets, retain_graph=True
    )
    rec.backward({"dqn3": StartPoint(q_all, targets)})
    ours = [p.grad.clone() for p in q.parameters()]
    rec.close()
    for a, b in zip(ours, expected):
        assert torch.equal(a, b)
    (run,) = load_logdir(str(tmp_path))
    assert run.flowgraph.losses[0].kind == "start_point"
    l2 = float(torch.sqrt(sum(g.double().pow(2).sum() for g in expected)))
    assert run.grads[0]["dqn3"].row("q")["l2"] == pytest.approx(l2, rel=1e-5)


def test_gradients_from_autograd_grad_are_recorded_as_a_step(tmp_path, nets):
    rec = Recorder(tmp_path, every_n_steps=1, models=nets)
    x = torch.randn(5, 3)
    loss = nets["online"](x).pow(2).mean()
    grads = torch.autograd.grad(loss, list(nets["online"].parameters()))
    rec.record_gradients({"mse": dict(zip(nets["online"].parameters(), grads))})
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    l2 = float(torch.sqrt(sum(g.double().pow(2).sum() for g in grads)))
    assert run.grads[0]["mse"].row("online")["l2"] == pytest.approx(l2, rel=1e-5)
    assert run.grads[0]["mse"].row("target")["grad_vars"] == 0
    assert run.flowgraph.cells["mse"]["online"] == fmt.UPDATES


def test_models_with_the_same_layer_names_never_merge_and_wrappers_leave_no_trace(tmp_path):
    torch.manual_seed(3)
    a, b, c = mlp(3, 1), nn.DataParallel(mlp(3, 1)), torch.compile(mlp(3, 1))
    rec = Recorder(tmp_path, every_n_steps=1, models={"a": a, "b": b, "c": c})
    assert list(rec.layout.scopes) == ["a", "a/0", "b", "b/0", "c", "c/0"]
    rec.close()
