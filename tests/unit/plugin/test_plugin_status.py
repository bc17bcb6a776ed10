"""The status route the tab polls every few seconds: each run's latest step and
a version that changes when TensorBoard has loaded anything newer for it,
behind an ETag (If-None-Match -> 304, no body), plus the --reload_interval
TensorBoard reads the logdir at (so the tab can say when it cannot be live)."""

from __future__ import annotations

import argparse
import json

import pytest
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider as mux_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import format as fmt
from tb_gradscope.plugin.plugin import GradscopePlugin
from tests.support import plugin_fixtures as pf

PREFIX = "/data/plugin/gradscope/"

pytestmark = pytest.mark.slow


def _served(logdir: str, reload_interval: float | None):
    multiplexer, _, client = _serve(logdir, reload_interval, refresh_seconds=0.0)
    return multiplexer, client


def _serve(logdir: str, reload_interval: float | None, refresh_seconds: float):
    """(multiplexer, plugin, client) of a plugin over TensorBoard's Python backend."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={fmt.PLUGIN_NAME: 0}
    )
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    flags = None if reload_interval is None else argparse.Namespace(reload_interval=reload_interval)
    context = base_plugin.TBContext(
        data_provider=mux_provider.MultiplexerDataProvider(multiplexer, logdir),
        sampling_hints={fmt.PLUGIN_NAME: 0},
        flags=flags,
    )
    plugin = GradscopePlugin(context, refresh_seconds=refresh_seconds)
    return multiplexer, plugin, werkzeug_test.Client(application.TensorBoardWSGI([plugin]))


def _json(client, route: str) -> dict:
    response = client.get(PREFIX + route)
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data(as_text=True))


def test_status_names_each_runs_latest_step_and_answers_304_until_something_changes(tmp_path):
    logdir = str(tmp_path)
    pf.write_run(logdir, "a", pf.RunSpec(steps=range(0, 3)))
    pf.write_plain_run(logdir, "scalars_only", range(2))
    multiplexer, client = _served(logdir, 5.0)

    first = client.get(PREFIX + "status")
    assert first.status_code == 200
    body = json.loads(first.get_data(as_text=True))
    assert body["reload_interval"] == 5.0
    assert [(r["run"], r["last_step"]) for r in body["runs"]] == [("a", 2)]
    etag = first.headers["ETag"]
    assert etag

    unchanged = client.get(PREFIX + "status", headers={"If-None-Match": etag})
    assert unchanged.status_code == 304
    assert unchanged.get_data() == b""

    # Training goes on (a second writer: a resumed job) and a new run starts.
    pf.write_run(logdir, "a", pf.RunSpec(steps=range(3, 5), flowgraph=False, events=False))
    pf.write_run(logdir, "b", pf.RunSpec(steps=[0]))
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    changed = client.get(PREFIX + "status", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    runs = {r["run"]: r for r in json.loads(changed.get_data(as_text=True))["runs"]}
    assert {name: r["last_step"] for name, r in runs.items()} == {"a": 4, "b": 0}
    assert runs["a"]["version"] != body["runs"][0]["version"]


def test_status_says_when_tensorboard_reads_the_logdir_only_once(tmp_path):
    pf.write_run(str(tmp_path), "a", pf.RunSpec(steps=[0]))
    _, client = _served(str(tmp_path), 0.0)
    assert (
        json.loads(client.get(PREFIX + "status").get_data(as_text=True))["reload_interval"] == 0.0
    )
    _, unknown = _served(str(tmp_path), None)
    assert (
        json.loads(unknown.get(PREFIX + "status").get_data(as_text=True))["reload_interval"] is None
    )


def test_a_run_loaded_after_a_status_answer_is_at_least_as_new_as_it(tmp_path):
    """The tab loads a run when a status answer says it changed, and is not told
    again: the run's data must then be the ones that answer saw, even within
    the second a run's listing is reused (TensorBoard's reload could leave the
    tab on the older steps for good, the next status answer being a 304)."""
    logdir = str(tmp_path)
    pf.write_run(logdir, "a", pf.RunSpec(steps=range(0, 3)))
    # A long window: within it, only the status answer can say there is more.
    multiplexer, plugin, client = _serve(logdir, 1.0, refresh_seconds=60.0)
    assert _json(client, "run?run=a")["steps"] == [0, 1, 2]

    pf.write_run(logdir, "a", pf.RunSpec(steps=range(3, 5), flowgraph=False, events=False))
    multiplexer.Reload()
    assert [r["last_step"] for r in _json(client, "status")["runs"]] == [4]
    listed = plugin._cache.listings
    assert _json(client, "run?run=a")["steps"] == [0, 1, 2, 3, 4]
    assert _json(client, "matrix?run=a")["step"] == 4
    for step in range(5):
        _json(client, f"matrix?run=a&step={step}")
    assert plugin._cache.listings == listed + 1, "the run is listed again once, then reused"
