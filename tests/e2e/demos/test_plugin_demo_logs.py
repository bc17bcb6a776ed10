"""Every route serves every committed demo run (logs written by the real
recorder, analysis and TF1 integration) cleanly: no warnings, documented states."""

from __future__ import annotations

import json
import pathlib

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope.plugin.plugin import GradscopePlugin
from tb_gradscope.read.flowstate import CELL_STATES
from tests.support import providers

DEMO_LOGS = pathlib.Path(__file__).resolve().parents[3] / "demo_logs"
ROUTES = ("run", "matrix", "flowgraph", "drift", "events", "conflict")


@pytest.fixture(scope="module")
def client() -> werkzeug_test.Client:
    assert DEMO_LOGS.is_dir(), f"{DEMO_LOGS} is missing; `make demo-logs` writes it"
    plugin = GradscopePlugin(
        base_plugin.TBContext(
            data_provider=providers.python_provider(str(DEMO_LOGS)), sampling_hints={}
        )
    )
    return werkzeug_test.Client(application.TensorBoardWSGI([plugin]))


def get(client, route: str, **params):
    response = client.get("/data/plugin/gradscope/" + route, query_string=params)
    assert response.status_code == 200, (route, params, response.get_data(as_text=True))
    return json.loads(response.get_data(as_text=True))


@pytest.mark.slow
def test_every_demo_run_is_served_without_warnings(client):
    runs = get(client, "runs")["runs"]
    assert len(runs) >= 2
    for entry in runs:
        run = entry["run"]
        assert entry["warnings"] == [], run
        info = get(client, "run", run=run)
        assert info["warnings"] == [] and info["steps"], run
        for route in ROUTES[1:]:
            get(client, route, run=run)
        matrix = get(client, "matrix", run=run)
        states = {cell["state"] for row in matrix["cells"].values() for cell in row.values()}
        assert states <= set(CELL_STATES), (run, states)
        if info["has_flowgraph"]:
            assert "no_gradient" not in states, run


@pytest.mark.slow
def test_events_route_derives_the_pair_anomalies_the_cli_reports(client):
    from tb_gradscope.read import summary
    from tb_gradscope.read.logdir import load_logdir

    leaky = get(client, "events", run="ema_lstm/leaky")["events"]
    names = {(e["type"], e["name"], e["step"]) for e in leaky}
    assert ("anomaly", "never_synced", min(s for _, _, s in names)) in names
    clean = get(client, "events", run="ema_lstm/clean")["events"]
    assert [e for e in clean if e["type"] == "anomaly"] == []
    (run_logs,) = load_logdir(str(DEMO_LOGS), run="ema_lstm/leaky")
    cli, _ = summary.run_anomalies(run_logs)
    assert {(e.name, e.pair, e.scope, e.step) for e in cli} == {
        (e["name"], e["pair"], e["scope"], e["step"]) for e in leaky if e["type"] == "anomaly"
    }
    assert get(client, "run", run="ema_lstm/leaky")["event_count"] == len(leaky)


def _report_blocked(run: str) -> tuple[dict, list[str]]:
    """`tb-gradscope report --format json` and its text for one demo run, in-process."""
    import argparse
    import io

    from tb_gradscope.commands import report

    args = dict(logdir=str(DEMO_LOGS), run_name=run, step=None, rules=None)
    out = io.StringIO()
    assert report.run(argparse.Namespace(format="json", **args), out=out, err=io.StringIO()) == 0
    text = io.StringIO()
    assert report.run(argparse.Namespace(format="text", **args), out=text, err=io.StringIO()) == 0
    (entry,) = json.loads(out.getvalue())["runs"]
    lines = text.getvalue().splitlines()
    start = lines.index("blocked edges:") + 1
    return entry, lines[start : lines.index("", start)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "run", ["dqn/clean", "dqn_tf1/clean", "actor_critic/clean", "multihead/clean"]
)
def test_a_blocked_cell_carries_reports_line_and_fix_for_its_cut(client, run):
    entry, printed = _report_blocked(run)
    matrix = get(client, "matrix", run=run, step=str(entry["step"]))
    blocked = {
        (loss, scope): cell
        for loss, row in matrix["cells"].items()
        for scope, cell in row.items()
        if cell["state"] == "blocked"
    }
    shown = {(t["line"], t["fix"]) for cell in blocked.values() for t in cell["blocked_by"]}
    # Every cut the tab gives a blocked cell is one report prints, word for word ("  line", "    fix: fix").
    pairs = set(zip([p[2:] for p in printed[0::2]], [p[len("    fix: ") :] for p in printed[1::2]]))
    assert shown <= pairs and (shown or not blocked), run
    for (loss, scope), cell in blocked.items():
        cuts = [e for e in entry["blocked_edges"] if e["loss"] == loss]
        if cell["static_state"] == "blocked" and cuts:
            assert cell["blocked_by"], (run, loss, scope)
            for text in cell["blocked_by"]:
                assert any(f"at {e['source']}" in text["line"] for e in cuts if e["source"]), text
    # Cells that are not blocked say nothing of cuts.
    assert all(
        "blocked_by" not in cell
        for row in matrix["cells"].values()
        for cell in row.values()
        if cell["state"] != "blocked"
    )
    edges = get(client, "flowgraph", run=run)["flowgraph"]["blocked_edges"]
    assert [f"  {e['line']}" for e in edges] == printed[0::2] or not edges
    assert [f"    fix: {e['fix']}" for e in edges] == printed[1::2] or not edges


@pytest.mark.slow
def test_dqn_target_cells_are_blocked_by_the_stop_gradient_at_target_q(client):
    cells = get(client, "matrix", run="dqn/clean")["cells"]["td"]
    entry, _ = _report_blocked("dqn/clean")
    (edge,) = entry["blocked_edges"]
    assert edge["producer_scope"] == "target/q"
    # target/l1 has no cut of its own: the forward pass reaches target/q, whose cut blocks it.
    for scope in ("target", "target/l1", "target/l2", "target/q"):
        (cut,) = cells[scope]["blocked_by"]
        assert cut["line"].endswith(f"at {edge['source']} in {edge['function']}"), scope
        assert cut["line"].startswith(
            f"td: target/q -> loss:td  StopGradient '{edge['op_name']}' (stop_gradient)"
        )


@pytest.mark.slow
def test_never_synced_words_its_distances_alike(client):
    (event,) = [
        e
        for e in get(client, "events", run="ema_lstm/leaky")["events"]
        if e["name"] == "never_synced"
    ]
    evidence = event["evidence"]
    message = event["message"]
    # Absolute distances as distances, the relative drift as a share of online's norm.
    assert f"starts at distance {evidence['distance']:.3g} from online" in message
    assert (
        f"({evidence['drift']:.3g} of online's norm, drift > {evidence['threshold']:g})" in message
    )
    assert f"online moved about {evidence['online_path']:.3g} over steps" in message
    assert "away" not in message and "apart" not in message
    assert evidence["drift"] == pytest.approx(
        evidence["distance"] / evidence["online_norm"], rel=1e-5
    )
