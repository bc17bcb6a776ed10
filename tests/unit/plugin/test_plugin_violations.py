"""The violations route serves what `tb-gradscope check --format json` prints.

The tab's Violations panel reads this route: the violations a run recorded
while training, plus the rules it recorded (`tracks(...)` among them) evaluated
over its logs, each marked recorded or evaluated, in check's words; a run
whose evidence is missing says what is missing and how to get it.
"""

from __future__ import annotations

import argparse
import io
import json
import pathlib

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import format as fmt
from tb_gradscope.commands import check
from tb_gradscope.plugin.plugin import GradscopePlugin
from tb_gradscope.read import violations
from tb_gradscope.read.runs import RunLogs
from tests.support import providers
from tests.support.frontend_logs import EAGER_RULES, eager_spec, write_run

DEMO_LOGS = pathlib.Path(__file__).resolve().parents[3] / "demo_logs"
DEMO_RUNS = sorted(
    {p.parent.relative_to(DEMO_LOGS).as_posix() for p in DEMO_LOGS.rglob("*tfevents*")}
)
ROUTE = "/data/plugin/gradscope/violations"


def _client(logdir: pathlib.Path) -> werkzeug_test.Client:
    samples = {"gradscope": 10_000}
    provider = providers.python_provider(str(logdir), samples)
    plugin = GradscopePlugin(base_plugin.TBContext(data_provider=provider, sampling_hints=samples))
    return werkzeug_test.Client(application.TensorBoardWSGI([plugin]))


def _check_json(logdir: pathlib.Path) -> tuple[int, dict, str]:
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(logdir=str(logdir), rules=None, run_name=None, format="json")
    code = check.run(args, out=out, err=err)
    return code, json.loads(out.getvalue()), err.getvalue()


@pytest.fixture(scope="module")
def demo_client() -> werkzeug_test.Client:
    return _client(DEMO_LOGS)


@pytest.fixture(scope="module")
def demo_check() -> dict[str, dict]:
    _, document, _ = _check_json(DEMO_LOGS)
    return {entry["run"]: entry for entry in document["runs"]}


def _served(client: werkzeug_test.Client, run: str) -> dict:
    response = client.get(ROUTE, query_string={"run": run})
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data(as_text=True))


@pytest.mark.parametrize("run", DEMO_RUNS)
def test_violations_route_serves_what_check_json_prints(demo_client, demo_check, run):
    assert _served(demo_client, run) == demo_check[run]


def test_leaky_demos_list_recorded_and_evaluated_violations(demo_client):
    served = _served(demo_client, "dqn/leaky")
    sources = {(v["name"], v["source"]) for v in served["violations"]}
    assert ("never(td, target/*)", violations.RECORDED) in sources
    # tracks(...) is never checked while training: only check (and the tab) evaluate it over the drift series.
    assert ("tracks(target, online, every=25)", violations.EVALUATED) in sources
    assert "tracks(target, online, every=25)" in served["rules"]
    assert _served(demo_client, "dqn/clean")["violations"] == []


def test_check_json_has_every_run_and_the_same_exit_status_as_text(demo_check):
    code, _, err = _check_json(DEMO_LOGS)
    assert code == check.VIOLATED and sorted(demo_check) == DEMO_RUNS
    assert "violation(s)" in err
    counted = sum(len(entry["violations"]) for entry in demo_check.values())
    assert f"checked {len(DEMO_RUNS)} run(s): {counted} violation(s)" in err


def test_run_without_flowgraph_says_what_is_missing_and_how_to_get_it(tmp_path):
    spec = eager_spec()
    write_run(tmp_path, spec)
    served = _served(_client(tmp_path), spec.name)
    _, printed, err = _check_json(tmp_path)
    (entry,) = printed["runs"]
    assert served == entry
    assert served["rules"] == list(EAGER_RULES)
    assert served["warnings"] == [violations.NO_FLOWGRAPH.format(run=spec.name)]
    assert "rec.analyze(step_fn, *example_args)" in served["warnings"][0] and "rec.analyze" in err
    # A tracks rule whose pair was never declared: check says so, and how to declare it.
    (untracked,) = [v for v in served["violations"] if v["name"] == "tracks(target, online)"]
    assert untracked["source"] == violations.EVALUATED
    assert "declare the pair to the Recorder" in untracked["message"]


def test_violations_route_names_a_missing_run_and_serves_only_json(demo_client):
    response = demo_client.get(ROUTE, query_string={"run": "no/such"})
    assert response.status_code == 404 and "no/such" in response.get_data(as_text=True)
    assert demo_client.get(ROUTE).status_code == 400
    assert (
        demo_client.get(ROUTE, query_string={"run": "dqn/leaky", "format": "csv"}).status_code
        == 400
    )


def test_recorded_run_without_grads_or_flowgraph_cannot_be_checked():
    run = RunLogs("empty", recorded_rules=["never(td, target/*)"])
    checked = violations.check_run(run)
    (only,) = checked.violations
    assert only.source == violations.EVALUATED and "cannot be checked" in only.event.message
    assert only.to_json()["evidence"] == {"at": "step", "unmatched": "run"}


def test_violation_json_writes_non_finite_evidence_as_null():
    event = fmt.Event(
        type=fmt.VIOLATION,
        name="never(a, b)",
        step=3,
        message="m",
        loss="a",
        scope="b",
        evidence={"l2": float("nan"), "path": ["b", "loss:a"]},
    )
    doc = violations.Violation("r", event, 2, 9, violations.RECORDED).to_json()
    assert doc["evidence"] == {"l2": None, "path": ["b", "loss:a"]}
    assert (doc["steps_seen"], doc["last_step"], doc["source"]) == (2, 9, "recorded")
