"""Steps, pairs and rules of the PyTorch Recorder: several optimizers in one
`rec.step()` block, AveragedModel and Polyak pairs, analysis again only when
the reach changes, rules at analysis and at recorded steps, gradient conflict."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.rules import FlowRuleViolation
from tb_gradscope.torch import Recorder
from tests.support import torch_loops


@pytest.fixture(scope="module")
def ddpg_run(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("ddpg")
    torch_loops.ddpg(logdir)
    (run,) = load_logdir(str(logdir))
    return run


def test_a_step_block_of_two_optimizers_counts_as_one_step(ddpg_run):
    assert ddpg_run.grad_steps == [0, 4, 8]
    assert set(ddpg_run.grads[4]) == {"critic", "actor"}
    assert {loss.name: loss.optimizer for loss in ddpg_run.flowgraph.losses} == {
        "critic": "opt0",
        "actor": "opt1",
    }


def test_the_actor_loss_reaches_the_critic_which_its_optimizer_does_not_apply(ddpg_run):
    cells = ddpg_run.flowgraph.cells
    assert cells["actor"]["actor"] == fmt.UPDATES
    assert cells["actor"]["critic"] == fmt.IGNORED  # the critic's optimizer stepped before
    assert cells["critic"]["critic"] == fmt.UPDATES
    assert cells["critic"]["critic_target"] == fmt.BLOCKED
    assert cells["critic"]["actor"] == fmt.INDEPENDENT


def test_polyak_pairs_read_their_declared_tau_over_the_whole_step(ddpg_run):
    by_name = {p.name: p for p in ddpg_run.pairs}
    assert set(by_name) == {"critic_target<-critic", "actor_target<-actor"}
    for pair in by_name.values():
        assert pair.attrs["tau"] == 0.1
        for table in pair.tables:
            assert table.row(table.info.scopes[0])["tau"] == pytest.approx(0.1, rel=1e-4)
    # UPDATE_STATS over the block: both optimizers and the Polyak updates
    update = ddpg_run.updates[4]
    assert update.row("actor")["update_norm"] > 0 and update.row("critic_target")["update_norm"] > 0


def test_an_averaged_model_pairs_with_its_source_without_module_or_n_averaged(tmp_path):
    torch_loops.byol(tmp_path)
    (run,) = load_logdir(str(tmp_path))
    (pair,) = run.pairs
    assert pair.name == "target<-online" and pair.attrs["online"] == "online"
    scopes = pair.tables[0].info.scopes
    assert scopes == ("target", "target/0", "target/2")
    steps = list(pair.steps)
    assert pair.tables[0].row("target")["tau"] == pytest.approx(1.0)  # first update copies
    assert pair.tables[steps.index(6)].row("target")["tau"] == pytest.approx(0.05, rel=1e-4)
    assert run.flowgraph.cells["byol"]["target"] == fmt.BLOCKED


def test_analysis_runs_again_only_when_the_reached_parameters_change(tmp_path):
    torch.manual_seed(0)
    trunk, head = torch_loops.mlp(3, 4), torch_loops.mlp(4, 1)
    rec = Recorder(tmp_path, every_n_steps=2, models={"trunk": trunk, "head": head})
    x = torch.randn(5, 3)
    for step in range(8):
        features = trunk(x) if step < 4 else trunk(x).detach()
        rec.backward({"l": head(features).pow(2).mean()})
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    # analysed at 0; recorded step 4 reaches less: analysed at once from step 0's
    # captured forward, and again at step 5 with the capture on; then never again
    assert [step for step, _ in run.flowgraphs] == [0, 4, 5]
    assert run.flowgraph_at(2).cells["l"]["trunk"] == fmt.UPDATES
    assert run.flowgraph_at(4).cells["l"]["trunk"] == fmt.BLOCKED
    assert run.flowgraph_at(6).cells["l"]["trunk"] == fmt.BLOCKED
    (edge,) = run.flowgraph_at(6).blocked_edges
    assert edge.op_name == "Tensor.detach" and edge.source.line > 0


def test_rules_are_checked_at_analysis_and_at_recorded_steps(tmp_path):
    torch_loops.dqn(
        tmp_path, steps=11, leak=True, rules=["only(td, online/*)", "blocked(td, target/*)"]
    )
    (run,) = load_logdir(str(tmp_path))
    names = {(e.name, e.step) for e in run.events if e.type == fmt.VIOLATION}
    assert ("blocked(td, target/*)", 0) in names  # at analysis, from the FlowGraph
    assert ("blocked(td, target/*)", 5) in names  # at a recorded step, from the tables
    assert run.recorded_rules == ["only(td, [online/*])", "blocked(td, target/*)"]


def test_on_violation_raise_raises_after_writing(tmp_path):
    with pytest.raises(FlowRuleViolation, match="blocked"):
        torch_loops.dqn(
            tmp_path, steps=3, leak=True, rules=["blocked(td, target/*)"], on_violation="raise"
        )
    (run,) = load_logdir(str(tmp_path))
    assert any(e.type == fmt.VIOLATION for e in run.events)


def test_conflict_is_the_cosine_of_two_losses_gradients_on_shared_scopes(tmp_path):
    torch.manual_seed(4)
    trunk, a, b = torch_loops.mlp(3, 4), torch_loops.mlp(4, 1), torch_loops.mlp(4, 1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"trunk": trunk, "a": a, "b": b})
    h = trunk(torch.randn(6, 3))
    la, lb = a(h).mean(), -b(h).pow(2).mean()
    ga = torch.autograd.grad(la, list(trunk.parameters()), retain_graph=True)
    gb = torch.autograd.grad(lb, list(trunk.parameters()), retain_graph=True)
    rec.backward({"a": la, "b": lb})
    rec.close()
    dot = sum(float((x.double() * y.double()).sum()) for x, y in zip(ga, gb))
    norms = [float(torch.sqrt(sum(x.double().pow(2).sum() for x in g))) for g in (ga, gb)]
    (run,) = load_logdir(str(tmp_path))
    ((step, cosine),) = run.cosines[("a", "b")]
    assert step == 0 and set(cosine) == {"trunk", "trunk/0"}
    assert cosine["trunk"] == pytest.approx(dot / (norms[0] * norms[1]), rel=1e-5)
    assert not np.isnan(cosine["trunk/0"])


def test_pairs_auto_finds_a_target_by_its_name_and_the_optimizer_that_skips_it(tmp_path):
    import copy

    torch.manual_seed(5)
    q = torch_loops.mlp(3, 4, 2)
    models = {"q": q, "q_target": copy.deepcopy(q), "other": torch_loops.mlp(3, 2)}
    opt = torch.optim.SGD([*q.parameters(), *models["other"].parameters()], 0.1)
    rec = Recorder(tmp_path, models=models, optimizers=[opt], pairs="auto")
    assert [p.name for p in rec.pairs] == ["q_target<-q"]
    rec.close()


def test_an_optimizer_stepped_with_a_closure_applies_the_closures_loss(tmp_path):
    """`optimizer.step(closure)` (LBFGS, Lightning's automatic optimization) runs
    the backward inside the step, after torch's step pre-hook: the loss is read
    as applied when the step ends (its post-hook), not as `ignored`."""
    torch.manual_seed(0)
    net = torch.nn.Linear(3, 1)
    opt = torch.optim.LBFGS(net.parameters(), max_iter=1)
    x, y = torch.randn(8, 3), torch.randn(8, 1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net}, optimizers=[opt])
    for _ in range(2):
        with rec.step():

            def closure():
                opt.zero_grad()
                loss = torch.nn.functional.mse_loss(net(x), y)
                rec.backward({"fit": loss})
                return loss

            opt.step(closure)
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    assert run.flowgraph.cells["fit"]["net"] == fmt.UPDATES
