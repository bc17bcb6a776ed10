"""End to end: a real `tensorboard` process per backend (--load_fast=true and
false) serving the Gradscope tab over real event files, one run of which is
still being written by another process."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from urllib.parse import quote

import pytest

from tests.support import plugin_fixtures as pf

pytestmark = pytest.mark.slow

LONG_STEPS = 3_000
API = "data/plugin/gradscope/"


@pytest.fixture(scope="session")
def e2e_logdir(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("plugin_e2e"))
    pf.write_bulk(root, "long", LONG_STEPS, pf.SCOPES, pf.LOSSES)
    pf.write_run(root, pf.MAIN_RUN, pf.RunSpec(steps=range(0, 12)))
    pf.write_plain_run(root, "plain", range(5))
    return root


@pytest.fixture(scope="session", params=["true", "false"], ids=["rust", "python"])
def tensorboard(request, e2e_logdir):
    """One TensorBoard per backend per session, with no gradscope flags."""
    server = pf.TensorBoardServer(e2e_logdir, request.param).start()
    try:
        yield server
    finally:
        server.stop()


def get_json(server, path: str, timeout: float = 60.0):
    status, headers, body = server.get(path, timeout=timeout)
    assert status == 200, body[:500]
    return json.loads(body)


def poll(server, path: str, done, timeout: float = 120.0):
    """GET `path` until done(json) holds; returns the last JSON."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        status, _, body = server.get(path)
        if status == 200:
            last = json.loads(body)
            if done(last):
                return last
        time.sleep(0.3)
    raise AssertionError(f"{path}: condition not met in {timeout}s; last answer: {str(last)[:300]}")


def test_backend_is_the_one_asked_for(tensorboard):
    text = "".join(tensorboard.lines)
    assert "not available" not in text and "falling back" not in text


def test_plugins_listing_enables_gradscope_tab(tensorboard):
    listing = poll(
        tensorboard, "data/plugins_listing", lambda d: d.get("gradscope", {}).get("enabled")
    )
    entry = listing["gradscope"]
    assert entry["tab_name"] == "Gradscope"
    assert entry["loading_mechanism"] == {
        "type": "IFRAME",
        "module_path": "/data/plugin/gradscope/index.js",
    }


def test_module_and_its_entry_page_load(tensorboard):
    status, headers, body = tensorboard.get(API + "index.js")
    assert status == 200 and headers["Content-Type"].startswith("application/javascript")
    assert b"render" in body, "the module exports render() for TensorBoard to call"
    status, _, page = tensorboard.get("data/plugin_entry.html?name=gradscope")
    assert status == 200 and b'href="plugin/gradscope/"' in page and b"./index.js" in page


def test_long_run_keeps_every_step_without_flags(tensorboard):
    run = poll(tensorboard, API + "run?run=long", lambda d: len(d["steps"]) >= LONG_STEPS)
    assert run["steps"] == list(range(LONG_STEPS))
    matrix = get_json(tensorboard, API + "matrix?run=long&step=1")
    assert matrix["losses"] == sorted(pf.LOSSES) and matrix["step"] == 1


def test_run_without_gradscope_data_is_absent(tensorboard):
    runs = poll(
        tensorboard, API + "runs", lambda d: {"long", pf.MAIN_RUN} <= {r["run"] for r in d["runs"]}
    )
    assert "plain" not in [r["run"] for r in runs["runs"]]
    status, _, body = tensorboard.get(API + "matrix?run=plain")
    assert status == 404 and b"plain" in body


def test_experiment_urls_and_bad_paths(tensorboard):
    runs = get_json(tensorboard, API + "runs")
    assert get_json(tensorboard, "experiment/some-id/" + API + "runs") == runs
    for path in ("..%2f..%2fetc/passwd", "%2e%2e/%2e%2e/etc/passwd", "plugin.py"):
        status, _, body = tensorboard.get(API + path)
        assert status in (400, 404) and b"root:" not in body
    status, _, body = tensorboard.get(API + "matrix?run=" + quote(pf.MAIN_RUN) + "&step=x")
    assert status == 400 and b"step" in body


def test_run_being_written_shows_new_steps_after_reload(tensorboard, tmp_path):
    run = f"live_{tensorboard.load_fast}"
    go = tmp_path / "go"
    writer = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.support.plugin_fixtures",
            tensorboard.logdir,
            run,
            "--steps",
            "5",
            "--batches",
            "2",
            "--go",
            str(go),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        first = poll(tensorboard, API + f"run?run={run}", lambda d: len(d["steps"]) >= 5)
        assert first["steps"] == list(range(5)), "the writer holds its second batch"
        assert get_json(tensorboard, API + f"matrix?run={run}")["step"] == 4
        go.touch()
        later = poll(tensorboard, API + f"run?run={run}", lambda d: len(d["steps"]) >= 10)
        assert later["steps"] == list(range(10))
        assert get_json(tensorboard, API + f"matrix?run={run}")["step"] == 9
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
