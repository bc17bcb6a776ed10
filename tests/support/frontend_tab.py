"""The Gradscope tab opened in a real browser, for the browser tests.

`open_tab` (a fixture) opens the tab inside TensorBoard (the plugin's iframe)
or directly (the page TensorBoard puts in that iframe); a `Tab` records every
console error, uncaught exception and dialog (a dialog would mean a name from
the logs ran as HTML), for `assert_clean`.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
from collections.abc import Callable, Iterator

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Dialog, Frame, Locator, Page

from tests.support.frontend_fixtures import TensorBoard

ENTRY = "/data/plugin_entry.html?name=gradscope"


@dataclasses.dataclass
class Tab:
    """A browser page showing the Gradscope tab, and what went wrong on it."""

    page: Page
    frame: Frame
    problems: list[str]

    def cell(self, loss: str, scope: str) -> Locator:
        return self.frame.locator(f'.gs-cell[data-loss="{css(loss)}"][data-scope="{css(scope)}"]')

    def row(self, scope: str) -> Locator:
        return self.frame.locator(f'tr[data-scope="{css(scope)}"]')

    def visible_scopes(self) -> list[str]:
        return self.frame.locator("#gs-matrix tbody tr").evaluate_all(
            "rows => rows.map(r => r.dataset.scope)"
        )

    def select_run(self, run: str) -> None:
        self.frame.locator("#gs-run").select_option(value=run)
        self.frame.wait_for_function(
            "run => document.querySelector('#gs-matrix')?.dataset.run === run", arg=run
        )

    def assert_clean(self) -> None:
        assert self.problems == [], "\n".join(self.problems)


# open_tab(embedded=False, color_scheme="light", run="dqn") -> Tab
OpenTab = Callable[..., Tab]


def css(text: str) -> str:
    """Escapes text for a double-quoted CSS attribute selector."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def watch(page: Page) -> list[str]:
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        # Opened as a top-level page, chromium asks for /favicon.ico by itself;
        # TensorBoard has none. Inside the tab's iframe it never asks.
        if message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
            problems.append(f"console {message.type}: {message.text} at {message.location}")

    page.on("console", on_console)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def on_dialog(dialog: Dialog) -> None:
        problems.append(f"dialog {dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return problems


@pytest.fixture()
def open_tab(browser: Browser, tensorboard: TensorBoard) -> Iterator[OpenTab]:
    """Opens the tab; `open_tab(embedded=..., color_scheme=...)` returns a Tab."""
    contexts = []

    def opener(embedded: bool = False, color_scheme: str = "light", run: str | None = "dqn") -> Tab:
        context = browser.new_context(
            color_scheme=color_scheme, viewport={"width": 1280, "height": 800}
        )
        contexts.append(context)
        page = context.new_page()
        problems = watch(page)
        if embedded:
            page.goto(tensorboard.url + "/#gradscope")
            page.wait_for_selector("iframe")
            frame = wait_for_plugin_frame(page)
        else:
            page.goto(tensorboard.url + ENTRY)
            frame = page.main_frame
        frame.wait_for_selector("#gs-matrix tbody tr", timeout=30_000)
        tab = Tab(page=page, frame=frame, problems=problems)
        if run is not None:
            tab.select_run(run)
        return tab

    yield opener
    for context in contexts:
        context.close()


def wait_for_plugin_frame(page: Page) -> Frame:
    for _ in range(200):
        for frame in page.frames:
            if "plugin_entry.html?name=gradscope" in frame.url:
                return frame
        page.wait_for_timeout(100)
    raise AssertionError(f"no gradscope iframe among {[f.url for f in page.frames]}")


DOC_IMAGES = pathlib.Path(__file__).resolve().parents[2] / "docs" / "images"
# Set to refresh the README's screenshots in docs/images/ (commit them after).
DOC_IMAGES_ENV = "GRADSCOPE_DOC_IMAGES"


def screenshot(target: Locator | Page, artifacts: pathlib.Path, name: str) -> None:
    """Saves `target` (an element, or a page's viewport) as artifacts/name, and as
    docs/images/name when $GRADSCOPE_DOC_IMAGES is set (so test runs do not
    rewrite committed files)."""
    target.screenshot(path=str(artifacts / name))
    if os.environ.get(DOC_IMAGES_ENV):
        DOC_IMAGES.mkdir(parents=True, exist_ok=True)
        target.screenshot(path=str(DOC_IMAGES / name))
