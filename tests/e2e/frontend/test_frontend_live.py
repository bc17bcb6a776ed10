"""The tab is live with TensorBoard's "Reload data" off (its default in 2.21):
while training runs, a new run and a new step show within 10 s of being
written, with TensorBoard at its default --reload_interval (5 s) and never
sending the iframe a DataReloaded message.

Starts its own TensorBoard (the session's reads the logdir every second, which
would flatter the figure), so it is slow.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser

from tests.support.frontend_fixtures import TensorBoard, start_tensorboard, stop_tensorboard
from tests.support.frontend_logs import DqnTrainer
from tests.support.frontend_tab import ENTRY, wait_for_plugin_frame, watch

pytest_plugins = ["tests.support.frontend_fixtures"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

# What the issue promises: a run or a step shows <= 10 s after it is written.
LIVE_SECONDS = 10.0


@pytest.fixture(scope="module")
def default_reload_tensorboard(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[TensorBoard, DqnTrainer]]:
    logdir = tmp_path_factory.mktemp("live_logs")
    first = DqnTrainer(logdir / "first")
    first.train(11)  # steps 0 and 10 recorded
    tb = start_tensorboard(
        logdir, tmp_path_factory.mktemp("tb_live") / "stderr.txt", reload_interval=None
    )
    try:
        tb.wait_for_steps("first", 2)
        yield tb, first
    finally:
        first.recorder.close()
        stop_tensorboard(tb.process)


def _seconds_until(frame, predicate: str, start: float) -> float:
    frame.wait_for_function(predicate, timeout=int(3 * LIVE_SECONDS * 1000), polling=100)
    return time.monotonic() - start


def test_new_run_and_new_step_show_within_10_s_with_reload_off(
    browser: Browser, default_reload_tensorboard: tuple[TensorBoard, DqnTrainer]
) -> None:
    tb, first = default_reload_tensorboard
    assert tb.json("status")["reload_interval"] == 5.0
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        problems = watch(page)
        page.goto(tb.url + "/#gradscope")
        frame = wait_for_plugin_frame(page)
        frame.wait_for_selector('#gs-matrix[data-run="first"]', timeout=30_000)
        frame.wait_for_selector('#gradscope[data-host="tensorboard"]', timeout=15_000)
        assert frame.locator("output.gs-step-label").text_content() == "10 (latest)"

        second = DqnTrainer(tb.logdir / "second", seed=1)
        try:
            second.train(1)  # its first record, flushed
            new_run = _seconds_until(
                frame,
                "() => !!document.querySelector('#gs-run option[value=\"second\"]')",
                time.monotonic(),
            )
        finally:
            second.recorder.close()

        first.train(10)  # step 20 recorded, flushed
        new_step = _seconds_until(
            frame,
            "() => document.querySelector('output.gs-step-label')?.textContent === '20 (latest)'",
            time.monotonic(),
        )
        print(f"new run shown after {new_run:.1f} s, new step after {new_step:.1f} s")
        assert new_run <= LIVE_SECONDS, f"the new run showed after {new_run:.1f} s"
        assert new_step <= LIVE_SECONDS, f"the new step showed after {new_step:.1f} s"
        # TensorBoard's "Reload data" is off: it never told the tab to reload.
        assert frame.locator("#gradscope").get_attribute("data-host-reloads") == "0"
        assert frame.locator("#gs-matrix").get_attribute("data-run") == "first"
        assert problems == [], "\n".join(problems)
    finally:
        context.close()


def test_the_poll_is_a_bodiless_304_while_nothing_changes_and_stops_while_hidden(
    browser: Browser, default_reload_tensorboard: tuple[TensorBoard, DqnTrainer]
) -> None:
    tb, _ = default_reload_tensorboard
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        page = context.new_page()
        answers: list[int] = []
        page.on(
            "response",
            lambda r: (
                answers.append(r.status)
                if r.url.split("?")[0].endswith("/gradscope/status")
                else None
            ),
        )
        page.goto(tb.url + ENTRY)
        page.wait_for_selector("#gs-matrix tbody tr", timeout=30_000)
        page.wait_for_timeout(5_000)
        assert answers[0] == 200
        assert len(answers) >= 2 and set(answers[1:]) == {304}, answers
        # Hidden (another browser tab in front), it stops asking.
        page.evaluate(
            "() => { Object.defineProperty(document, 'visibilityState', {get: () => 'hidden'}); "
            "document.dispatchEvent(new Event('visibilitychange')); }"
        )
        page.wait_for_timeout(2_500)  # a poll under way ends
        count = len(answers)
        page.wait_for_timeout(5_000)
        assert len(answers) == count, "the tab kept polling while hidden"
    finally:
        context.close()
