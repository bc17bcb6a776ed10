"""Untrusted names round-trip: the real Recorder writes scopes, losses and a
source file named with HTML/JS payloads, a 10 kB name, RTL overrides,
newlines and terminal escapes (tests/support/reliability_names.py); the plugin serves
them unchanged, `tb-gradscope report` prints them recognisably with every
control character escaped, and the tab shows them as text, escaped the same
way, without running any of them.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import sys
from collections.abc import Iterator

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import format as fmt
from tb_gradscope.commands.text import safe
from tb_gradscope.plugin.plugin import GradscopePlugin
from tests.support import providers
from tests.support import reliability_names as names

pytest_plugins = ["tests.support.frontend_fixtures"]
pytestmark = pytest.mark.slow

REPO = pathlib.Path(__file__).resolve().parents[3]
BIN = pathlib.Path(sys.executable).parent
PREFIX = "/data/plugin/gradscope/"


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> pathlib.Path:
    """The hostile run, recorded by the real Recorder in a subprocess that
    runs a copy of reliability_names.py saved under a hostile file name."""
    work = tmp_path_factory.mktemp("hostile_work")
    script = work / names.FILE
    shutil.copy(REPO / "tests" / "support" / "reliability_names.py", script)
    root = tmp_path_factory.mktemp("hostile_logs")
    result = subprocess.run(
        [sys.executable, names.FILE, str(root)],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return root


@pytest.fixture(scope="module")
def client(logdir) -> werkzeug_test.Client:
    samples = {fmt.PLUGIN_NAME: 1000}
    context = base_plugin.TBContext(
        data_provider=providers.python_provider(str(logdir), samples), sampling_hints=samples
    )
    return werkzeug_test.Client(application.TensorBoardWSGI([GradscopePlugin(context)]))


def get(client, route: str, **params):
    response = client.get(PREFIX + route, query_string=params)
    assert response.status_code == 200, response.get_data(as_text=True)[:500]
    return json.loads(response.get_data(as_text=True))


def test_plugin_serves_hostile_names_unchanged(client):
    run = get(client, "run", run=names.RUN)
    assert sorted(loss["name"] for loss in run["losses"]) == sorted(names.LOSSES)
    assert sorted(s["name"] for s in run["scopes"]) == sorted(names.SCOPES)
    assert run["steps"] == list(range(names.STEPS)) and run["warnings"] == []
    matrix = get(client, "matrix", run=names.RUN)
    assert set(matrix["cells"]) == set(names.LOSSES)
    assert matrix["cells"]["plain"][names.SCOPES[0]]["state"] == "blocked"
    for i, loss in enumerate(names.LOSSES):
        if loss != "plain":
            assert (
                matrix["cells"][loss][names.SCOPES[i % len(names.SCOPES)]]["state"] == "updates"
            ), loss
    series = get(
        client,
        "series",
        run=names.RUN,
        kind="grad_stats",
        name=names.LOSSES[0],
        scope=names.SCOPES[0],
        stat="l2",
    )
    assert [p[0] for p in series["points"]] == list(range(names.STEPS))


def test_blocked_edge_source_names_the_hostile_file(client):
    graph = get(client, "flowgraph", run=names.RUN)["flowgraph"]
    edges = [e for e in graph["blocked_edges"] if e["loss"] == "plain"]
    assert edges, graph["blocked_edges"]
    assert {e["source"]["file"] for e in edges if e.get("source")} == {names.FILE}


def _report(logdir: pathlib.Path) -> str:
    result = subprocess.run(
        [str(BIN / "tb-gradscope"), "report", str(logdir)],
        capture_output=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.decode("utf-8")


def test_report_escapes_control_characters_and_keeps_names_recognisable(logdir):
    out = _report(logdir)
    raw = [
        f"U+{ord(c):04X}"
        for c in set(out)
        if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F
    ]
    assert raw == [], f"raw control characters in the report: {raw}"
    assert "\u202e" not in out and "\u202d" not in out, "a raw bidi override in the report"
    for shown in (
        "\\x1b[2J\\x1b]0;title\\x07esc",
        "new\\x0aline",
        "\\u202eevil\u05d0\u05d1 rtl",
        "tab\\x09cr\\x0ddel\\x7fnul",
        names.SCOPES[0],
        names.SCOPES[1],
        names.SCOPES[2],
        names.LONG,
        names.LOSSES[0],
        "\\x1b[31mred\\x1b[0m\\x0aloss",
        "\\u202eloss",
        "\\x1b]0;title\\x07bell",
    ):
        assert shown in out, f"{shown[:80]!r} not in the report"
    assert names.FILE.replace("\u202e", "\\u202e") in out  # the blocked edge's source line


def test_report_long_name_widens_only_its_own_row(logdir):
    """A 10 kB name used to pad every row of the flow table to 10 kB (a 200 kB report)."""
    lines = _report(logdir).splitlines()
    long_lines = [line for line in lines if len(line) > 2_000]
    assert len(long_lines) == 2, [
        line[:80] for line in long_lines
    ]  # the header (loss) and its scope's row
    assert all(names.LONG in line for line in long_lines)


@pytest.fixture(scope="module")
def hostile_tensorboard(logdir, tmp_path_factory) -> Iterator:
    from tests.support.frontend_fixtures import start_tensorboard, stop_tensorboard

    tb = start_tensorboard(logdir, tmp_path_factory.mktemp("tb_hostile") / "stderr.txt")
    try:
        tb.wait_for_steps(names.RUN, names.STEPS, timeout=120)
        yield tb
    finally:
        stop_tensorboard(tb.process)


@pytest.mark.browser
@pytest.mark.parametrize("embedded", [False, True])
def test_tab_shows_hostile_names_as_text_and_runs_no_script(browser, hostile_tensorboard, embedded):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    problems: list[str] = []
    try:
        page = context.new_page()
        page.on("dialog", lambda d: (problems.append(f"dialog {d.type}: {d.message}"), d.dismiss()))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        if embedded:
            page.goto(hostile_tensorboard.url + "/#gradscope")
            from tests.support.frontend_tab import wait_for_plugin_frame

            frame = wait_for_plugin_frame(page)
        else:
            page.goto(hostile_tensorboard.url + "/data/plugin_entry.html?name=gradscope")
            frame = page.main_frame
        frame.wait_for_selector("#gs-matrix tbody tr", timeout=60_000)
        assert frame.locator("#gs-run").input_value() == names.RUN
        text = frame.locator("body").inner_text()
        # Shown as `tb-gradscope report` prints them: controls and bidi overrides escaped.
        for name in names.SCOPES + names.LOSSES:
            assert safe(name) in text, f"{safe(name)[:60]!r} is not visible text"
        # (innerText separates table cells with tabs and rows with newlines of its own.)
        assert [f"U+{ord(c):04X}" for c in set(text) if c not in "\t\n" and safe(c) != c] == []
        # The 10 kB name is ellipsised: the page does not scroll sideways.
        assert frame.evaluate(
            "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
        )
        assert (
            frame.locator("img, svg[onload], script:not([src])").evaluate_all(
                f"els => els.filter(e => /{names.FLAG}|alert/.test(e.outerHTML)).length"
            )
            == 0
        )
        # Open a hostile cell's and the blocked cell's details: they render names too.
        # Real pointer clicks: a 10 kB scope name must not widen its row header
        # over the cells (Playwright refuses a click another element would catch).
        frame.locator(".gs-cell").first.click(timeout=10_000)
        frame.locator('.gs-cell[data-loss="plain"]').first.click(timeout=10_000)
        page.wait_for_timeout(1500)
        for target in (page.main_frame, frame):
            assert target.evaluate(f"() => window.{names.FLAG} === undefined"), "a payload ran"
        assert problems == [], problems
    finally:
        context.close()


RAW_PATHS = [
    "..%2f..%2f..%2f..%2fetc%2fpasswd",
    "..%2F..%2Fetc/passwd",
    "../../../../etc/passwd",
    "%2e%2e/%2e%2e/%2e%2e/etc/passwd",
    "%2e%2e%2f%2e%2e%2fetc%2fpasswd",
    "..%5c..%5cetc%5cpasswd",
    "%252e%252e%252fetc%252fpasswd",
    "index.js%00.png",
    "index.js%00",
    "%00",
    "..%00/etc/passwd",
    "%c0%ae%c0%ae/etc/passwd",
    "/etc/passwd",
    "//etc/passwd",
    "index.js/..%2f..%2f..%2fplugin.py",
    "..%2fplugin.py",
    "..%2fstatic.py",
    "../__init__.py",
    "%2fetc%2fpasswd",
    "index.js?x=..%2f",
    "index.js#..",
    "index.js",
    "./index.js",
    "INDEX.JS",
    "index.js.map",
    "a" * 8000,
]


def test_real_tensorboard_serves_no_file_outside_static_for_raw_paths(hostile_tensorboard):
    """Raw request lines (not normalised by a client) to a real TensorBoard's HTTP server."""
    import http.client

    from tb_gradscope.plugin.static import STATIC_DIR

    bundle = (STATIC_DIR / "index.js").read_bytes()
    host, port = hostile_tensorboard.url.split("//")[1].split(":")
    served = 0
    for raw in RAW_PATHS:
        for prefix in ("/data/plugin/gradscope/", "/experiment/x/data/plugin/gradscope/"):
            connection = http.client.HTTPConnection(host, int(port), timeout=30)
            connection.putrequest("GET", prefix + raw, skip_accept_encoding=True)
            connection.endheaders()
            response = connection.getresponse()
            body = response.read()
            connection.close()
            assert response.status < 500, (raw, response.status, body[:300])
            assert b"Traceback" not in body and b"root:x:0:0" not in body, raw
            assert b"from __future__ import" not in body, raw  # a Python source of the plugin
            if response.status == 200:
                served += 1
                assert body in (bundle, (STATIC_DIR / "index.js").read_bytes()), raw
    assert served >= 2  # index.js itself, under both prefixes
