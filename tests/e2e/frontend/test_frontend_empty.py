"""The tab over a logdir without gradscope data, then with some.

Starts its own TensorBoard on an empty logdir (hence slow), opens the plugin
page directly (not inside TensorBoard, so the tab must fall back to polling),
checks the empty state says how to record and when a new run will show, then
writes a run and sees it show without pressing Refresh.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.support.frontend_fixtures import TensorBoard, start_tensorboard, stop_tensorboard
from tests.support.frontend_logs import HOSTILE, hostile_spec, write_run

pytest_plugins = ["tests.support.frontend_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]


@pytest.fixture(scope="module")
def empty_tensorboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    logdir = tmp_path_factory.mktemp("empty_logs")
    tb = start_tensorboard(logdir, tmp_path_factory.mktemp("tb_empty") / "stderr.txt")
    try:
        yield tb
    finally:
        stop_tensorboard(tb.process)


def test_empty_logdir_explains_how_to_record_then_shows_new_runs(
    browser: Browser, empty_tensorboard: TensorBoard, artifacts: pathlib.Path
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 720})
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("dialog", lambda d: (errors.append(f"dialog: {d.message}"), d.dismiss()))
        page.goto(empty_tensorboard.url + "/data/plugin_entry.html?name=gradscope")
        empty = page.locator("#gs-empty")
        empty.wait_for()
        assert "Recorder(logdir=" in empty.locator("code").text_content()
        assert page.locator("#gs-run").is_disabled()
        # Not inside TensorBoard: nobody will send DataReloaded, so it polls.
        page.wait_for_selector('#gradscope[data-host="polling"]')
        # The truth about when a run shows: TensorBoard reads every 1 s here.
        page.wait_for_function(
            "() => document.querySelector('#gs-empty-when').textContent.includes('every 1 s')"
        )
        when = page.locator("#gs-empty-when").text_content()
        assert "checks for new runs every 2 s" in when and "within about 4 s" in when, when
        assert "Reload data" in when
        page.screenshot(path=str(artifacts / "gradscope-empty.png"))

        write_run(empty_tensorboard.logdir, hostile_spec())
        page.wait_for_selector("#gs-matrix", timeout=20_000)
        assert page.locator("#gs-empty").count() == 0
        assert page.locator("#gs-run").input_value() == HOSTILE
        assert errors == []
    finally:
        context.close()
