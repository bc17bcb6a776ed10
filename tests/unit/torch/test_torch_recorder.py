"""The PyTorch Recorder on a plain DQN loop: the records read back through the
repo's own readers, the FlowGraph says torch, the TD target's cut names its line."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tests.support import torch_loops


def _target_line() -> int:
    """The `with torch.no_grad():` above the TD target's line: the line that cut it."""
    lines, start = inspect.getsourcelines(torch_loops.dqn)
    target = next(i for i, text in enumerate(lines) if "the TD target's line" in text)
    assert lines[target - 1].strip() == "with torch.no_grad():"
    return start + target - 1


@pytest.fixture(scope="module")
def dqn_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("dqn")
    torch_loops.dqn(logdir, rules=["never(td, target/*)"])
    (run,) = load_logdir(str(logdir))
    return run


def test_gradients_are_recorded_every_n_steps_per_loss_and_scope(dqn_run):
    assert dqn_run.grad_steps == [0, 5, 10, 15, 20]
    table = dqn_run.grads[5]["td"]
    assert table.row("online")["grad_vars"] == 4 and table.row("online")["l2"] > 0
    assert table.row("target")["grad_vars"] == 0
    assert list(table.info.scopes) == [
        "online",
        "online/0",
        "online/2",
        "target",
        "target/0",
        "target/2",
    ]
    assert table.info.attrs["every_n_steps"] == 5 and table.info.attrs["rules"] == [
        "never(td, target/*)"
    ]


def test_the_flowgraph_says_torch_and_the_td_target_is_blocked_at_its_line(dqn_run):
    graph = dqn_run.flowgraph
    assert graph.source == "torch"
    assert graph.cells["td"]["online/0"] == fmt.UPDATES
    assert graph.cells["td"]["target"] == fmt.BLOCKED
    assert graph.applied == ["online", "online/0", "online/2"]
    edges = {e.producer_scope: e for e in graph.blocked_edges}
    assert set(edges) == {"target/0", "target/2"}
    edge = edges["target/0"]
    assert edge.cause == "stop_gradient" and edge.op_type == "no_grad"
    assert edge.source.file.endswith("torch_loops.py") and edge.source.line == _target_line()
    assert dqn_run.state("td", "target/0", 10) == fmt.BLOCKED


def test_a_backward_the_loop_runs_itself_between_observe_and_observed_records_the_same(
    dqn_run, tmp_path
):
    torch_loops.dqn(tmp_path, rules=["never(td, target/*)"], observed=True)
    (run,) = load_logdir(str(tmp_path))
    assert run.grad_steps == dqn_run.grad_steps
    for step in run.grad_steps:
        np.testing.assert_array_equal(
            run.grads[step]["td"].values, dqn_run.grads[step]["td"].values
        )
        np.testing.assert_array_equal(run.updates[step].values, dqn_run.updates[step].values)
    assert run.flowgraph.cells == dqn_run.flowgraph.cells


def test_the_flowgraph_is_written_once_when_the_reach_never_changes(dqn_run):
    assert [step for step, _ in dqn_run.flowgraphs] == [0]


def test_update_stats_measure_the_whole_step_and_drift_sees_the_hard_copy(dqn_run):
    update = dqn_run.updates[10]
    assert update.row("online")["update_norm"] > 0
    assert update.row("online")["weight_norm"] > 0
    assert update.row("target")["update_norm"] > 0  # the copy at step 10 moved the target
    assert dqn_run.updates[5].row("target")["update_norm"] == 0
    (pair,) = dqn_run.pairs
    steps = list(pair.steps)
    assert steps == [0, 5, 10, 15, 20]
    at_10 = pair.tables[steps.index(10)].row("target")
    assert at_10["drift"] == 0 and at_10["tau"] == pytest.approx(1.0)
    at_5 = pair.tables[steps.index(5)].row("target")
    assert at_5["drift"] > 0 and at_5["target_step"] == 0
    assert np.isnan(pair.tables[0].row("target")["target_moved"])
    assert pair.tables[steps.index(10)].row("target")["target_moved"] > 0


def test_a_leaky_td_target_reaches_the_target_network_which_no_optimizer_applies(tmp_path):
    torch_loops.dqn(tmp_path, steps=6, leak=True)
    (run,) = load_logdir(str(tmp_path))
    assert run.flowgraph.cells["td"]["target/2"] == fmt.IGNORED
    assert run.flowgraph.blocked_edges == []
    assert run.grads[5]["td"].row("target/2")["grad_vars"] == 2


def test_backward_gives_the_same_grad_as_the_sum_backward_bitwise(tmp_path):
    from tb_gradscope.torch import Recorder

    torch.manual_seed(0)
    net = torch_loops.mlp(3, 5, 2)
    x = torch.randn(7, 3)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net})
    out = net(x)
    losses = {"a": out[:, 0].pow(2).mean(), "b": out[:, 1].abs().mean()}
    rec.backward(losses)
    ours = [p.grad.clone() for p in net.parameters()]
    rec.close()
    for total in (lambda ls: sum(ls.values()), lambda ls: ls["a"] + ls["b"]):
        net.zero_grad()
        out = net(x)
        total({"a": out[:, 0].pow(2).mean(), "b": out[:, 1].abs().mean()}).backward()
        for a, b in zip(ours, (p.grad for p in net.parameters())):
            assert torch.equal(a, b)


def test_per_loss_gradients_equal_separate_backwards(tmp_path):
    from tb_gradscope.torch import Recorder

    torch.manual_seed(1)
    trunk, head_a, head_b = torch_loops.mlp(3, 4), torch_loops.mlp(4, 1), torch_loops.mlp(4, 1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"trunk": trunk, "a": head_a, "b": head_b})
    x = torch.randn(5, 3)
    h = trunk(x)
    la, lb = head_a(h).mean(), head_b(h).pow(2).mean()
    expected = {
        name: torch.autograd.grad(loss, list(trunk.parameters()), retain_graph=True)
        for name, loss in (("a", la), ("b", lb))
    }
    rec.backward({"a": la, "b": lb})
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    for name, grads in expected.items():
        l2 = float(torch.sqrt(sum(g.double().pow(2).sum() for g in grads)))
        assert run.grads[0][name].row("trunk")["l2"] == pytest.approx(l2, rel=1e-5)
    assert run.grads[0]["a"].row("b")["grad_vars"] == 0
    (cosines,) = run.cosines.values()
    ((step, by_scope),) = cosines
    assert set(by_scope) == {"trunk", "trunk/0"}
