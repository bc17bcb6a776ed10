"""The demos' logs, read back through TensorBoard's ingestion: structure and leaks.

One session fixture regenerates every demo for a few steps (one process, like
`tb-gradscope demo`); the tests compare its structure with the committed
demo_logs/ and check, with the rules engine, that each clean twin keeps its
demo's RULES and each leaky twin breaks them.
"""

from __future__ import annotations

import io
import os
import pathlib

import numpy as np
import pytest

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.demos import spec as demo_spec
from tb_gradscope.read.anomalies import MOVED_BY_OPTIMIZER, NEVER_SYNCED, find_anomalies
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.runs import RunLogs
from tb_gradscope.read.tracks import check_drift

REPO = pathlib.Path(__file__).resolve().parents[3]
DEMO_LOGS = REPO / "demo_logs"
FEW_STEPS = 11  # records steps 0, 5 and 10 with the default every 5
EXPECTED_RUNS = sorted(
    f"{name}/{twin}" for name in demo_spec.DEMO_NAMES for twin in demo_spec.load_demo(name).twins
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="session")
def fresh(tmp_path_factory) -> dict[str, RunLogs]:
    """Every demo retrained for FEW_STEPS steps into a temporary logdir."""
    from tb_gradscope.demos.runner import run_demos

    logdir = tmp_path_factory.mktemp("demos")
    run_demos(str(logdir), steps=FEW_STEPS, env="builtin", stream=io.StringIO())
    return {logs.run: logs for logs in load_logdir(str(logdir))}


@pytest.fixture(scope="session")
def committed() -> dict[str, RunLogs]:
    """The committed demo_logs/ (regenerate with `make demo-logs`)."""
    assert DEMO_LOGS.is_dir(), "demo_logs/ is missing: run `make demo-logs` and commit it"
    return {logs.run: logs for logs in load_logdir(str(DEMO_LOGS))}


def structure(logs: RunLogs) -> dict:
    """What must not change between a regenerated run and the committed one."""
    ((_, graph),) = logs.flowgraphs[:1] or [(0, None)]
    first = min(logs.grads)
    return {
        "losses": sorted(logs.grads[first]),
        "grad_scopes": {loss: t.info.scopes for loss, t in logs.grads[first].items()},
        "update_scopes": logs.updates[min(logs.updates)].info.scopes,
        "flowgraphs": len(logs.flowgraphs),
        "cells": graph.cells if graph else None,
        "applied": graph.applied if graph else None,
        "blocked_edges": sorted(
            (e.loss, e.op_type, e.cause, e.producer_scope, e.consumer_scope)
            for e in (graph.blocked_edges if graph else [])
        ),
        "event_names": sorted({(e.type, e.name) for e in logs.events}),
        "pairs": {name: series[0][1].info.scopes for name, series in logs.drift.items()},
        "anomalies": anomalies(logs),
        "warnings": logs.warnings,
    }


def anomalies(logs: RunLogs) -> dict[str, list[tuple[str, str]]]:
    """{pair: sorted (anomaly, scope)} derived from the run's drift series."""
    found = {}
    for name, series in logs.drift.items():
        events = find_anomalies(
            name, series[0][1].info.attrs, [s for s, _ in series], [t for _, t in series]
        )
        found[name] = sorted({(e.name, e.scope) for e in events})
    return found


def test_every_demo_writes_one_run_per_twin(fresh, committed):
    assert sorted(fresh) == EXPECTED_RUNS
    assert sorted(committed) == EXPECTED_RUNS


@pytest.mark.parametrize("run", EXPECTED_RUNS)
def test_regenerated_run_has_the_committed_structure(fresh, committed, run):
    assert structure(fresh[run]) == structure(committed[run]), (
        f"{run} differs from demo_logs/: if the change is intended, run "
        "`make demo-logs` and commit demo_logs/"
    )


@pytest.mark.parametrize("run", EXPECTED_RUNS)
def test_regenerated_run_records_every_fifth_step(fresh, run):
    assert fresh[run].steps == [0, 5, 10]


def test_committed_logs_cover_each_demos_default_steps(committed):
    for name in demo_spec.DEMO_NAMES:
        demo = demo_spec.load_demo(name)
        for twin in demo.twins:
            last = committed[f"{name}/{twin}"].steps[-1]
            assert demo.default_steps - demo_spec.DEFAULT_RECORD_EVERY <= last < demo.default_steps


def _rules(name: str, kinds: tuple) -> list:
    return [
        r
        for r in map(rules_lib.parse_rule, demo_spec.load_demo(name).rules)
        if isinstance(r, kinds)
    ]


FLOW_RULES = (rules_lib.Never, rules_lib.Only, rules_lib.Blocked)
DRIFT_RULES = (rules_lib.Tracks,)
# Demos whose leak breaks a flow rule; ema_lstm's leak shows in its drift.
DRIFT_LEAKS = ("ema_lstm", "torch_ema_lstm")
FLOW_LEAKS = [n for n in demo_spec.DEMO_NAMES if n not in DRIFT_LEAKS]


def _static_violations(logs: RunLogs, name: str) -> list:
    graph = logs.flowgraphs[0][1]
    return rules_lib.check_flowgraph(_rules(name, FLOW_RULES), graph)


def _step_violations(logs: RunLogs, name: str) -> list:
    """The flow rules' violations at each recorded step, read as `check` reads
    them: with the FlowGraph in force, which tells a gradient that only
    reaches a scope another loss's optimizer moves (torch_ddpg's actor on the
    critic: ignored) from one that trains it."""
    rules = _rules(name, FLOW_RULES)
    return [
        e
        for step, grads in sorted(logs.grads.items())
        for e in rules_lib.check_stats(
            rules, step, grads, logs.updates.get(step), logs.flowgraph_at(step)
        )
    ]


# Every twin but the leaky one keeps its demo's rules (dqn_tf1 has two such).
KEEPERS = [
    (n, t)
    for n in demo_spec.DEMO_NAMES
    for t in demo_spec.load_demo(n).twins
    if t != demo_spec.LEAKY
]


@pytest.mark.parametrize("name, twin", KEEPERS)
def test_clean_twin_keeps_its_rules_in_the_flowgraph(committed, name, twin):
    assert _static_violations(committed[f"{name}/{twin}"], name) == []


@pytest.mark.parametrize("name, twin", KEEPERS)
def test_clean_twin_keeps_its_rules_at_every_recorded_step(committed, name, twin):
    assert _step_violations(committed[f"{name}/{twin}"], name) == []


@pytest.mark.parametrize("name, twin", KEEPERS)
def test_clean_twin_keeps_its_tracks_rules(committed, name, twin):
    logs = committed[f"{name}/{twin}"]
    assert check_drift(_rules(name, DRIFT_RULES), logs.drift, logs.last_step) == []


@pytest.mark.parametrize("name", FLOW_LEAKS)
def test_leaky_twin_breaks_its_rules_in_the_flowgraph(committed, name):
    assert _static_violations(committed[f"{name}/leaky"], name)


@pytest.mark.parametrize("name", FLOW_LEAKS)
def test_leaky_twin_breaks_its_rules_at_every_recorded_step(committed, name):
    logs = committed[f"{name}/leaky"]
    broken_at = {e.step for e in _step_violations(logs, name)}
    assert broken_at == set(logs.steps)


@pytest.mark.parametrize("name", DRIFT_LEAKS)
def test_ema_lstm_leaky_target_starts_unsynced_and_clean_does_not(committed, name):
    assert anomalies(committed[f"{name}/clean"]) == {"target<-online": []}
    assert anomalies(committed[f"{name}/leaky"]) == {"target<-online": [(NEVER_SYNCED, "target")]}
    first = {
        twin: committed[f"{name}/{twin}"].drift["target<-online"][0][1].row("target")["drift"]
        for twin in ("clean", "leaky")
    }
    assert first["leaky"] > 0.5 > 0.2 > first["clean"]


@pytest.mark.parametrize(
    "name, target, pair",
    [
        ("dqn", "target", "target<-online"),
        ("dqn3_grad_start", "target", "target<-online"),
        ("dqn_tf1", "target_net", "target_net<-eval_net"),
        ("torch_dqn", "target", "target<-online"),
        ("torch_dqn3_grad_start", "target", "target<-online"),
    ],
)
def test_dqn_leaky_target_is_moved_by_the_optimizer(committed, name, target, pair):
    assert anomalies(committed[f"{name}/clean"]) == {pair: []}
    assert anomalies(committed[f"{name}/leaky"]) == {pair: [(MOVED_BY_OPTIMIZER, target)]}


def test_dqn_tf1_target_is_blocked_by_stop_gradient_and_independent_when_fed(committed):
    states = {
        twin: committed[f"dqn_tf1/{twin}"].flowgraphs[0][1].cells["td"]["target_net"]
        for twin in ("clean", "placeholder", "leaky")
    }
    assert states == {"clean": fmt.BLOCKED, "placeholder": fmt.INDEPENDENT, "leaky": fmt.UPDATES}
    graph = committed["dqn_tf1/clean"].flowgraphs[0][1]
    assert [(e.op_type, e.producer_scope) for e in graph.blocked_edges] == [
        ("StopGradient", "target_net/l2")
    ]


def test_dqn_leaky_twin_moves_the_target_network_and_clean_does_not(committed):
    for twin, moves in (("clean", False), ("leaky", True)):
        logs = committed[f"dqn/{twin}"]
        for step, table in logs.updates.items():
            assert (table.row("target")["update_norm"] > 0) == moves, (twin, step)
            assert table.row("online")["update_norm"] > 0, (twin, step)


def test_dqn_clean_twin_blocks_the_target_at_its_stop_gradient(committed):
    graph = committed["dqn/clean"].flowgraphs[0][1]
    assert {e.op_type for e in graph.blocked_edges} == {"StopGradient"}
    assert all(e.producer_scope.startswith("target") for e in graph.blocked_edges)
    assert graph.cells["td"]["target"] == fmt.BLOCKED


def test_dqn3_clean_twin_starts_the_gradient_at_the_q_output(committed):
    graph = committed["dqn3_grad_start/clean"].flowgraphs[0][1]
    (loss,) = graph.losses
    assert (loss.name, loss.kind) == ("td", "start_point")
    assert graph.cells["td"]["target"] == fmt.INDEPENDENT
    leaky = committed["dqn3_grad_start/leaky"].flowgraphs[0][1]
    assert [info.kind for info in leaky.losses] == ["loss"]


def test_multihead_loss2_updates_the_shared_layer_only_in_the_leaky_twin(committed):
    states = {
        twin: committed[f"multihead/{twin}"].flowgraphs[0][1].cells["loss2"]
        for twin in ("clean", "leaky")
    }
    assert states["clean"]["Agent/layer1"] == fmt.IGNORED
    assert states["leaky"]["Agent/layer1"] == fmt.UPDATES
    assert states["clean"]["Agent/layer2_2"] == states["leaky"]["Agent/layer2_2"] == fmt.UPDATES


def test_multihead_loss2_gradient_on_the_shared_layer_is_recorded_only_in_the_leaky_twin(committed):
    for twin, reaches in (("clean", False), ("leaky", True)):
        logs = committed[f"multihead/{twin}"]
        for step, grads in logs.grads.items():
            assert (grads["loss2"].row("Agent/layer1")["grad_vars"] > 0) == reaches, (twin, step)
            assert grads["loss1"].row("Agent/layer1")["grad_vars"] > 0


def test_actor_critic_advantage_is_cut_only_in_the_clean_twin(committed):
    clean = committed["actor_critic/clean"].flowgraphs[0][1]
    leaky = committed["actor_critic/leaky"].flowgraphs[0][1]
    assert clean.cells["actor"]["ac/critic"] == fmt.BLOCKED
    assert leaky.cells["actor"]["ac/critic"] == fmt.UPDATES
    assert clean.cells["critic"]["ac/actor"] == fmt.INDEPENDENT


def test_demo_logs_stay_small():
    size = sum(f.stat().st_size for f in DEMO_LOGS.rglob("*") if f.is_file())
    assert size < 20 * 2**20, f"demo_logs/ is {size / 2**20:.1f} MB; keep it under 20 MB"


# TF1 graph, LSTM, sampled actions; PyTorch with two optimizers, PyTorch LSTM.
RERUN = ("dqn_tf1", "ema_lstm", "actor_critic", "torch_ddpg", "torch_ema_lstm")


def test_regenerating_demos_is_deterministic_whatever_ran_before(fresh, tmp_path):
    from tb_gradscope.demos.runner import run_demos

    run_demos(str(tmp_path), only=RERUN, steps=FEW_STEPS, env="builtin", stream=io.StringIO())
    again = {logs.run: logs for logs in load_logdir(str(tmp_path))}
    assert sorted(os.listdir(tmp_path)) == sorted(RERUN)
    assert sorted(again) == [r for r in EXPECTED_RUNS if r.split("/")[0] in RERUN]
    for run, after in again.items():
        before = fresh[run]
        assert before.steps == after.steps
        for step in before.steps:
            for loss, table in before.grads[step].items():
                assert (table.values == after.grads[step][loss].values).all(), (run, step, loss)
            assert (before.updates[step].values == after.updates[step].values).all(), (run, step)
        for pair, series in before.drift.items():
            assert [s for s, _ in series] == [s for s, _ in after.drift[pair]]
            for (step, table), (_, again_table) in zip(series, after.drift[pair]):
                assert np.array_equal(table.values, again_table.values, equal_nan=True), (
                    run,
                    pair,
                    step,
                )


def _cuts_there(run: str, lines: list[str], number: int) -> bool:
    """Whether line `number` of a demo cuts a gradient path: a tf.stop_gradient
    (TF), a .detach() or the `with torch.no_grad():` of a block (PyTorch)."""
    line = lines[number - 1]
    if demo_spec.framework(run.split("/")[0]) == "tensorflow":
        return "tf.stop_gradient(" in line
    return ".detach()" in line or line.strip() == "with torch.no_grad():"


def test_blocked_edges_point_at_the_demos_stop_gradient_lines(committed):
    edges = [
        (run, e)
        for run, logs in sorted(committed.items())
        for e in logs.flowgraphs[0][1].blocked_edges
    ]
    assert {run for run, _ in edges} >= {
        "dqn/clean",
        "dqn_tf1/clean",
        "ema_lstm/clean",
        "actor_critic/clean",
        "torch_dqn/clean",
        "torch_multihead/clean",
        "torch_ddpg/clean",
        "torch_ema_lstm/clean",
    }
    for run, edge in edges:
        assert edge.source is not None, run
        assert edge.source.file.startswith("tb_gradscope/demos/"), (run, edge.source.file)
        if edge.op_type == "no_grad":
            continue  # see test_no_grad_cuts_point_at_their_with_torch_no_grad_block
        lines = (REPO / edge.source.file).read_text().splitlines()
        assert _cuts_there(run, lines, edge.source.line), (run, lines[edge.source.line - 1])


def test_no_grad_cuts_point_at_their_with_torch_no_grad_block(committed):
    edges = [
        (run, e)
        for run, logs in sorted(committed.items())
        for e in logs.flowgraphs[0][1].blocked_edges
        if e.op_type == "no_grad"
    ]
    assert {run for run, _ in edges} >= {"torch_ddpg/clean", "torch_ema_lstm/clean"}
    for run, edge in edges:
        lines = (REPO / edge.source.file).read_text().splitlines()
        assert lines[edge.source.line - 1].strip() == "with torch.no_grad():", (run, edge)


TORCH_RUNS = [r for r in EXPECTED_RUNS if demo_spec.framework(r.split("/")[0]) == "torch"]


@pytest.mark.parametrize("run", TORCH_RUNS)
def test_torch_demos_are_traced_from_pytorch(committed, run):
    assert committed[run].flowgraphs[0][1].source == "torch"


def _cells(committed, name: str, loss: str, scope: str) -> dict[str, str]:
    return {
        twin: committed[f"{name}/{twin}"].flowgraphs[0][1].cells[loss][scope]
        for twin in ("clean", "leaky")
    }


def test_torch_dqn_target_is_detached_in_the_clean_twin_and_trained_in_the_leaky_one(committed):
    assert _cells(committed, "torch_dqn", "td", "target") == {
        "clean": fmt.BLOCKED,
        "leaky": fmt.UPDATES,
    }
    assert _cells(committed, "torch_dqn", "td", "online") == {
        "clean": fmt.UPDATES,
        "leaky": fmt.UPDATES,
    }


def test_torch_multihead_param_groups_alone_let_loss2_train_the_shared_layer(committed):
    assert _cells(committed, "torch_multihead", "loss2", "Agent/layer1") == {
        "clean": fmt.BLOCKED,
        "leaky": fmt.UPDATES,
    }
    assert _cells(committed, "torch_multihead", "loss1", "Agent/layer2_2") == {
        "clean": fmt.INDEPENDENT,
        "leaky": fmt.INDEPENDENT,
    }


def test_torch_dqn3_clean_twin_starts_the_gradient_at_the_q_output(committed):
    graph = committed["torch_dqn3_grad_start/clean"].flowgraphs[0][1]
    assert [(info.name, info.kind) for info in graph.losses] == [("td", "start_point")]
    assert graph.cells["td"]["target"] == fmt.INDEPENDENT
    leaky = committed["torch_dqn3_grad_start/leaky"].flowgraphs[0][1]
    assert [info.kind for info in leaky.losses] == ["loss"]
    assert leaky.cells["td"]["target"] == fmt.UPDATES


def test_torch_ddpg_actor_reaches_the_critic_but_steps_it_only_in_the_leaky_twin(committed):
    assert _cells(committed, "torch_ddpg", "actor", "critic") == {
        "clean": fmt.IGNORED,
        "leaky": fmt.UPDATES,
    }
    assert _cells(committed, "torch_ddpg", "critic", "critic_target") == {
        "clean": fmt.BLOCKED,
        "leaky": fmt.BLOCKED,
    }
    for twin in ("clean", "leaky"):
        logs = committed[f"torch_ddpg/{twin}"]
        assert sorted(logs.drift) == ["actor_target<-actor", "critic_target<-critic"]
        assert sorted(logs.grads[logs.steps[-1]]) == ["actor", "critic"]  # both losses, one step
