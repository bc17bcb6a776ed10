"""Damaged logs (issue 15, item 4): the plugin and the CLI serve every intact
step, say what they skipped, and never crash.

One logdir of real event files damaged as real runs are (see
tests/support/reliability1_logs.py), read by the plugin through TensorBoard's WSGI app
over both data providers and by `tb-gradscope report/check` in a subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from tensorboard import context as tb_context
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import format as fmt
from tb_gradscope.plugin.plugin import GradscopePlugin
from tests.support import providers
from tests.support import reliability1_logs as rl

PREFIX = "/data/plugin/gradscope/"
SAMPLES = {"gradscope": 10_000}
READABLE = (rl.CLEAN, rl.TRUNCATED, rl.BAD_CRC, rl.FUTURE, rl.RESUMED)
NO_DATA = (rl.EMPTY, rl.RANDOM)
# Both TensorBoard backends stop reading a file at its first bad record.
BAD_CRC_STEPS_MIN = 1


@pytest.fixture(scope="module")
def damaged(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("damaged_logs"))
    return root, rl.write_damaged_logdir(root)


def _loaded(data_provider) -> bool:
    ctx = tb_context.RequestContext()
    tensors = data_provider.list_tensors(ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME)
    if set(tensors) < set(READABLE):
        return False
    last = {run: max(t.max_step for t in tensors[run].values()) for run in READABLE}
    return last[rl.RESUMED] == rl.RESUMED_STEPS[-1] and last[rl.CLEAN] == rl.STEPS[-1]


@pytest.fixture(scope="module", params=["python", "rust"])
def client(request, damaged):
    root, _ = damaged

    def make(data_provider):
        plugin = GradscopePlugin(
            base_plugin.TBContext(data_provider=data_provider, sampling_hints=SAMPLES)
        )
        return werkzeug_test.Client(application.TensorBoardWSGI([plugin]))

    if request.param == "python":
        yield make(providers.python_provider(root, SAMPLES))
        return
    with providers.rust_provider(root, SAMPLES) as rust:
        deadline = time.monotonic() + 60
        while not _loaded(rust):
            assert time.monotonic() < deadline, "the data server did not load the damaged logdir"
            time.sleep(0.2)
        yield make(rust)


def _get(client, route, **params):
    response = client.get(PREFIX + route, query_string=params)
    assert response.status_code < 500, response.get_data(as_text=True)
    assert "Traceback" not in response.get_data(as_text=True)
    return response


def test_plugin_serves_intact_steps_of_damaged_runs(client, damaged):
    _, intact = damaged
    runs = {r["run"]: r for r in _get(client, "runs").get_json()["runs"]}
    assert set(runs) == set(READABLE), "damaged-but-readable runs listed, empty/random ones not"
    served = {}
    for run in READABLE:
        body = _get(client, "run", run=run).get_json()
        served[run] = body["steps"]
        if intact[run] is not None:
            assert set(intact[run]) <= set(body["steps"]), (run, body["steps"])
        for step in body["steps"]:
            matrix = _get(client, "matrix", run=run, step=step)
            assert matrix.status_code == 200, (run, step, matrix.get_data(as_text=True))
    # Resumed: every step once, the overlap not doubled.
    assert served[rl.RESUMED] == sorted(set(served[rl.RESUMED]))
    # A bad CRC mid-file: what precedes it is served (the backend reads no further).
    assert len(served[rl.BAD_CRC]) >= BAD_CRC_STEPS_MIN
    assert served[rl.BAD_CRC] == list(rl.STEPS)[: len(served[rl.BAD_CRC])]
    lost = len(rl.STEPS) - len(served[rl.BAD_CRC])
    print(
        f"\nplugin: 7 damaged runs, 0 errors; bad CRC mid-file: {lost} of {len(rl.STEPS)} steps "
        f"not shown (TensorBoard stops reading the file); truncated tail: "
        f"{len(intact[rl.TRUNCATED])} of {len(rl.STEPS)} steps complete"
    )


def test_plugin_names_the_future_version_record_it_skipped(client):
    body = _get(client, "run", run=rl.FUTURE).get_json()
    assert body["losses"] and "next" not in [
        loss["name"] if isinstance(loss, dict) else loss for loss in body["losses"]
    ]
    assert any("newer tb-gradscope" in w and "next" in w for w in body["warnings"]), body[
        "warnings"
    ]


@pytest.mark.parametrize("run", NO_DATA)
def test_plugin_404s_cleanly_for_empty_and_random_files(client, run):
    response = _get(client, "run", run=run)
    assert response.status_code == 404
    assert run in response.get_data(as_text=True)


def _cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "tb_gradscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_report_serves_intact_steps_and_names_damaged_files(damaged):
    root, intact = damaged
    done = _cli("report", root, "--format", "json")
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    runs = {r["run"]: r for r in json.loads(done.stdout)["runs"]}
    assert set(runs) == set(READABLE)
    assert runs[rl.CLEAN]["warnings"] == []
    assert runs[rl.RESUMED]["step"] == rl.RESUMED_STEPS[-1] and runs[rl.RESUMED]["warnings"] == []
    assert (
        runs[rl.TRUNCATED]["step"] == intact[rl.TRUNCATED][-1] + 1
    )  # the partial step's other tables
    (cut,) = runs[rl.TRUNCATED]["warnings"]
    assert "cut short" in cut and rl.TRUNCATED in cut
    (crc,) = runs[rl.BAD_CRC]["warnings"]
    assert "bad data CRC" in crc and "reads no further" in crc and rl.BAD_CRC in crc
    assert any("newer tb-gradscope" in w for w in runs[rl.FUTURE]["warnings"])


def test_cli_check_warns_about_damage_and_exits_zero(damaged):
    root, _ = damaged
    done = _cli("check", root)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout + done.stderr
    assert "Traceback" not in out
    for needle in ("bad data CRC", "cut short", "newer tb-gradscope"):
        assert needle in out, out


def test_cli_on_only_unreadable_files_exits_2_with_a_reason(tmp_path):
    for name, content in (("empty", b""), ("random", os.urandom(2048))):
        (tmp_path / name).mkdir()
        (tmp_path / name / f"events.out.tfevents.0.{name}").write_bytes(content)
    done = _cli("report", str(tmp_path))
    assert done.returncode == 2
    assert "no gradscope data" in done.stderr and "Traceback" not in done.stderr


def test_damage_scan_finds_nothing_in_a_clean_file(damaged):
    from tb_gradscope.read.eventfiles import damaged_event_files

    root, _ = damaged
    assert damaged_event_files(root, rl.CLEAN) == []
    assert damaged_event_files(root, rl.RESUMED) == []
