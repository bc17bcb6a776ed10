"""Every route serves every committed demo run (logs written by the real
recorder, analysis and TF1 integration) cleanly: no warnings, documented states."""

from __future__ import annotations

import json
import pathlib

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope.read.flowstate import CELL_STATES
from tb_gradscope.plugin.plugin import GradscopePlugin
from tests import providers

DEMO_LOGS = pathlib.Path(__file__).resolve().parent.parent / "demo_logs"
ROUTES = ("run", "matrix", "flowgraph", "drift", "events", "conflict")


@pytest.fixture(scope="module")
def client() -> werkzeug_test.Client:
    assert DEMO_LOGS.is_dir(), f"{DEMO_LOGS} is missing; `make demo-logs` writes it"
    plugin = GradscopePlugin(
        base_plugin.TBContext(data_provider=providers.python_provider(str(DEMO_LOGS)), sampling_hints={})
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
