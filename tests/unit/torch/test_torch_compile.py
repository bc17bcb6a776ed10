"""torch.compile: a compiled DQN (model and loss function, CPU inductor) records
the tables of the eager one, trains bitwise as without the recorder, and the
recorder causes no graph break or recompile (torch._dynamo's counters).

One module fixture compiles the DQN twice with inductor (with and without a
recorder; tens of seconds on two cores), so the slow tests read the same three
runs; a counting backend shows cheaply when compiled code runs eagerly.
"""

from __future__ import annotations

import copy
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import Recorder, pair_models
from tests.support.torch_loops import mlp

STEPS = 6
EVERY = 2


def dqn(logdir, compiled: bool) -> list[torch.Tensor]:
    """A DQN whose online network and TD loss are `torch.compile`d when `compiled`;
    with a logdir, recorded (the compiled module itself handed to `models`)."""
    torch.manual_seed(0)
    q = mlp(4, 16, 2)
    q_target = copy.deepcopy(q)
    opt = torch.optim.Adam(q.parameters(), 1e-3)
    net = torch.compile(q) if compiled else q

    def td_loss(q_sa: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.smooth_l1_loss(q_sa, y)

    td = torch.compile(td_loss) if compiled else td_loss
    rec = None
    if logdir is not None:
        rec = Recorder(
            logdir,
            every_n_steps=EVERY,
            models={"online": net, "target": q_target},
            optimizers=[opt],
            pairs=[pair_models(q_target, q, every=3)],
        )
    for step in range(STEPS):
        s, s2 = torch.randn(2, 16, 4)
        a, r = torch.randint(0, 2, (16,)), torch.randn(16)
        with torch.no_grad():
            y = r + 0.99 * q_target(s2).max(1).values  # the TD target's line
        loss = td(net(s).gather(1, a[:, None]).squeeze(1), y)
        opt.zero_grad()
        if rec is None:
            loss.backward()
        else:
            rec.backward({"td": loss})
        opt.step()
        if step % 3 == 2:
            q_target.load_state_dict(q.state_dict())
    if rec is not None:
        rec.close()
    return [p.detach().clone() for p in q.parameters()]


def compiled_run(logdir) -> tuple[list[torch.Tensor], dict]:
    """The compiled DQN from a fresh compiler, and what Dynamo counted doing it."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    params = dqn(logdir, compiled=True)
    seen = {kind: dict(counters[kind]) for kind in ("frames", "graph_break", "stats")}
    seen["recompiles"] = dict(counters["recompiles"]) if "recompiles" in counters else {}
    return params, seen


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("compile")
    dqn(base / "eager", compiled=False)
    plain_params, plain_counts = compiled_run(None)
    params, counts = compiled_run(base / "compiled")
    (eager,) = load_logdir(str(base / "eager"))
    (compiled,) = load_logdir(str(base / "compiled"))
    return types.SimpleNamespace(
        eager=eager,
        compiled=compiled,
        params=params,
        plain_params=plain_params,
        counts=counts,
        plain_counts=plain_counts,
    )


@pytest.mark.slow
def test_a_compiled_model_and_loss_record_the_tables_of_the_eager_ones(runs):
    assert runs.compiled.grad_steps == runs.eager.grad_steps == list(range(0, STEPS, EVERY))
    for step in runs.eager.grad_steps:
        got, want = runs.compiled.grads[step]["td"], runs.eager.grads[step]["td"]
        assert list(got.info.scopes) == list(want.info.scopes)  # no `_orig_mod` scope
        np.testing.assert_allclose(got.values, want.values, rtol=1e-6)
        np.testing.assert_allclose(
            runs.compiled.updates[step].values, runs.eager.updates[step].values, rtol=1e-6
        )
    assert sorted(runs.compiled.drift) == sorted(runs.eager.drift)


@pytest.mark.slow
def test_the_analysis_of_a_compiled_module_runs_on_its_eager_original(runs):
    graph, eager = runs.compiled.flowgraph, runs.eager.flowgraph
    assert graph.cells == eager.cells
    assert graph.state("td", "online") == fmt.UPDATES
    assert graph.state("td", "target") == fmt.BLOCKED

    def cuts(g):
        return sorted(
            (e.producer_scope, e.cause, e.op_type, e.source.line) for e in g.blocked_edges
        )

    assert cuts(graph) == cuts(eager) and cuts(graph)


@pytest.mark.slow
def test_the_compiled_step_with_the_recorder_is_bitwise_the_compiled_step_without(runs):
    assert all(torch.equal(a, b) for a, b in zip(runs.params, runs.plain_params))


@pytest.mark.slow
def test_the_recorder_causes_no_graph_break_and_no_recompile(runs):
    assert runs.plain_counts["graph_break"] == {}
    assert runs.counts == runs.plain_counts
    assert runs.counts["frames"]["total"] >= 2  # the model and the loss were compiled


def test_compiled_code_runs_eagerly_while_any_recorder_watches(tmp_path):
    """Two recorders watch from their construction to their first backward:
    a compiled function compiles only once neither does."""
    compiled = []

    def backend(gm, example_inputs):
        compiled.append(gm)
        return gm.forward

    torch._dynamo.reset()
    double = torch.compile(lambda x: x * 2, backend=backend)
    nets = [mlp(2, 1), mlp(2, 1)]
    recs = [Recorder(tmp_path / f"r{i}", models={"net": n}) for i, n in enumerate(nets)]
    x = torch.randn(3, 2)
    double(x)
    recs[0].backward({"loss": nets[0](x).sum()})  # the first stops watching
    double(x)
    assert compiled == []  # the second still watches
    recs[1].backward({"loss": nets[1](x).sum()})
    double(x)
    assert len(compiled) == 1
    for rec in recs:
        rec.close()
