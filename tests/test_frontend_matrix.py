"""The Gradscope tab in a real browser against a real TensorBoard process.

Each test opens the tab either inside TensorBoard (http://HOST/#gradscope, the
plugin's iframe) or directly (/data/plugin_entry.html?name=gradscope, the page
TensorBoard puts in that iframe), and fails on any console error, uncaught
exception or dialog (a dialog would mean a name from the logs ran as HTML).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
from typing import Iterator

import pytest

pytest.register_assert_rewrite("tests.frontend_fixtures")

from tests.frontend_fixtures import HOSTILE, TensorBoard, dqn_spec, hostile_spec, write_run

pytest_plugins = ["tests.frontend_fixtures"]
pytestmark = pytest.mark.browser

ENTRY = "/data/plugin_entry.html?name=gradscope"


@dataclasses.dataclass
class Tab:
    """A browser page showing the Gradscope tab, and what went wrong on it."""

    page: object
    frame: object
    problems: list[str]

    def cell(self, loss: str, scope: str):
        return self.frame.locator(f'.gs-cell[data-loss="{_css(loss)}"][data-scope="{_css(scope)}"]')

    def row(self, scope: str):
        return self.frame.locator(f'tr[data-scope="{_css(scope)}"]')

    def visible_scopes(self) -> list[str]:
        return self.frame.locator("#gs-matrix tbody tr").evaluate_all("rows => rows.map(r => r.dataset.scope)")

    def select_run(self, run: str) -> None:
        self.frame.locator("#gs-run").select_option(value=run)
        self.frame.wait_for_function(
            "run => document.querySelector('#gs-matrix')?.dataset.run === run", arg=run
        )

    def assert_clean(self) -> None:
        assert self.problems == [], "\n".join(self.problems)


def _css(text: str) -> str:
    """Escapes text for a double-quoted CSS attribute selector."""
    return text.replace("\\", "\\\\").replace('"', '\\"')


def _watch(page) -> list[str]:
    problems: list[str] = []

    def on_console(message) -> None:
        # Opened as a top-level page, chromium asks for /favicon.ico by itself;
        # TensorBoard has none. Inside the tab's iframe it never asks.
        if message.type == "error" and not message.location.get("url", "").endswith("/favicon.ico"):
            problems.append(f"console {message.type}: {message.text} at {message.location}")

    page.on("console", on_console)
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))

    def on_dialog(dialog) -> None:
        problems.append(f"dialog {dialog.type}: {dialog.message}")
        dialog.dismiss()

    page.on("dialog", on_dialog)
    return problems


@pytest.fixture()
def open_tab(browser, tensorboard: TensorBoard) -> Iterator:
    """Opens the tab; `open_tab(embedded=..., color_scheme=...)` returns a Tab."""
    contexts = []

    def opener(embedded: bool = False, color_scheme: str = "light", run: str | None = "dqn") -> Tab:
        context = browser.new_context(color_scheme=color_scheme, viewport={"width": 1280, "height": 800})
        contexts.append(context)
        page = context.new_page()
        problems = _watch(page)
        if embedded:
            page.goto(tensorboard.url + "/#gradscope")
            page.wait_for_selector("iframe")
            frame = _wait_for_plugin_frame(page)
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


def _wait_for_plugin_frame(page):
    for _ in range(200):
        for frame in page.frames:
            if "plugin_entry.html?name=gradscope" in frame.url:
                return frame
        page.wait_for_timeout(100)
    raise AssertionError(f"no gradscope iframe among {[f.url for f in page.frames]}")


def test_tab_loads_inside_tensorboard_without_console_errors(open_tab, artifacts: pathlib.Path) -> None:
    tab = open_tab(embedded=True)
    # Our guest side of TensorBoard's message channel got an answer.
    tab.frame.wait_for_selector('#gradscope[data-host="tensorboard"]', timeout=10_000)
    runs = tab.frame.locator("#gs-run option").evaluate_all("os => os.map(o => o.value)")
    assert sorted(runs) == sorted([HOSTILE, "dqn", "live"])  # scalars_only has no gradscope data
    tab.page.screenshot(path=str(artifacts / "gradscope-in-tensorboard.png"), full_page=True)
    tab.assert_clean()


def test_td_loss_updates_online_scopes_and_blocks_target(open_tab, artifacts: pathlib.Path) -> None:
    spec = dqn_spec()
    tab = open_tab()
    assert tab.visible_scopes() == list(spec.scopes)
    headers = tab.frame.locator("#gs-matrix thead th[data-loss]").all_text_contents()
    assert sorted(headers) == sorted(spec.losses)
    for scope in spec.scopes:
        expected = "updates" if scope.startswith("online") else "blocked"
        assert tab.cell("td", scope).get_attribute("data-state") == expected, scope
    # aux reaches only online/l1; it does not depend on online/l2 at all.
    assert tab.cell("aux", "online/l2").get_attribute("data-state") == "independent"
    tab.frame.locator("#gs-matrix").screenshot(path=str(artifacts / "gradscope-matrix-only.png"))
    tab.page.screenshot(path=str(artifacts / "gradscope-matrix.png"))
    tab.assert_clean()


def test_updates_are_shaded_by_gradient_norm(open_tab) -> None:
    tab = open_tab()
    big = tab.cell("td", "online/l1").evaluate("b => getComputedStyle(b).backgroundColor")
    small = tab.cell("aux", "online/l1").evaluate("b => getComputedStyle(b).backgroundColor")
    assert _luminance(big) < _luminance(small), (big, small)
    tab.assert_clean()


def test_folding_a_scope_rolls_its_children_up(open_tab) -> None:
    spec = dqn_spec()
    tab = open_tab()
    toggle = tab.row("online").locator("button.gs-scope")
    assert toggle.get_attribute("aria-expanded") == "true"
    toggle.click()
    assert tab.visible_scopes() == ["online", "target", "target/l1", "target/l2"]
    assert tab.row("online").get_attribute("data-folded") == "true"
    # The folded row carries the roll-up of its children.
    assert tab.cell("td", "online").get_attribute("data-state") == "updates"
    rolled = float(tab.cell("td", "online").text_content())
    assert math.isclose(rolled, spec.l2("td", "online", spec.steps[-1]), rel_tol=0.05)
    # Enter on the focused toggle unfolds it again.
    tab.row("online").locator("button.gs-scope").press("Enter")
    assert tab.visible_scopes() == list(spec.scopes)
    tab.assert_clean()


def test_clicking_a_cell_shows_all_its_numbers(open_tab) -> None:
    spec = dqn_spec()
    last = spec.steps[-1]
    tab = open_tab()
    title = tab.cell("td", "online/l2").get_attribute("title")
    assert "‖g‖" in title and "state: updates" in title
    tab.cell("td", "online/l2").click()
    details = tab.frame.locator("#gs-details")
    assert tab.cell("td", "online/l2").get_attribute("aria-pressed") == "true"
    field = lambda name: details.locator(f'dd[data-field="{name}"]').text_content()
    assert field("state") == "updates"
    assert field("static state") == "updates"
    assert math.isclose(float(field("‖g‖ (L2)")), spec.l2("td", "online/l2", last), rel_tol=1e-5)
    assert math.isclose(float(field("max |g|")), spec.l2("td", "online/l2", last) / 3, rel_tol=1e-5)
    update_norm, weight_norm = spec.update_row("online/l2", last)
    assert math.isclose(float(field("‖Δθ‖ applied")), update_norm, rel_tol=1e-5)
    assert math.isclose(float(field("‖Δθ‖/‖θ‖")), update_norm / weight_norm, rel_tol=1e-4)
    # The extra column shows the same applied update for the scope row.
    ratio = tab.row("online/l2").locator('td[data-column="ratio"]').text_content()
    assert math.isclose(float(ratio), update_norm / weight_norm, rel_tol=0.05)
    tab.assert_clean()


def test_step_slider_moves_over_kept_steps(open_tab) -> None:
    spec = dqn_spec()
    tab = open_tab()
    slider = tab.frame.locator("#gs-step")
    assert slider.get_attribute("max") == str(len(spec.steps) - 1)
    assert tab.frame.locator("output.gs-step-label").text_content().startswith(str(spec.steps[-1]))
    slider.focus()
    slider.press("Home")
    tab.frame.wait_for_selector(f'#gs-matrix[aria-label="flow matrix at step {spec.steps[0]}"]')
    first = float(tab.cell("td", "online/l1").text_content())
    assert math.isclose(first, spec.l2("td", "online/l1", spec.steps[0]), rel_tol=0.05)
    tab.assert_clean()


def test_names_from_logs_render_as_text(open_tab, artifacts: pathlib.Path) -> None:
    spec = hostile_spec()
    tab = open_tab(embedded=True, run=HOSTILE)
    assert tab.frame.locator("#gs-run").input_value() == HOSTILE
    header = tab.frame.locator("#gs-matrix thead th[data-loss]").first.text_content()
    assert header == HOSTILE
    leaf = spec.scopes[-1]
    assert tab.row(leaf).locator(".gs-scope").text_content().endswith(HOSTILE)
    tab.cell(HOSTILE, leaf).click()
    assert tab.frame.locator('#gs-details dd[data-field="scope"]').text_content() == leaf
    assert tab.frame.locator("img").count() == 0
    tab.page.wait_for_timeout(300)  # an onerror handler would have fired by now
    tab.page.screenshot(path=str(artifacts / "gradscope-hostile-names.png"))
    tab.assert_clean()


def test_tensorboard_reload_refreshes_the_tab(open_tab, tensorboard: TensorBoard) -> None:
    live = dqn_spec("live")
    tab = open_tab(embedded=True, run="live")
    slider = tab.frame.locator("#gs-step")
    assert slider.get_attribute("max") == "1"
    write_run(tensorboard.logdir, live, steps=live.steps[2:])
    tensorboard.wait_for_steps("live", len(live.steps))
    # TensorBoard's reload broadcasts experimental.DataReloaded to the iframe.
    tab.page.locator("app-header-reload button.reload-button").click()
    tab.frame.wait_for_selector(f'#gs-step[max="{len(live.steps) - 1}"]', timeout=15_000)
    assert tab.frame.locator("output.gs-step-label").text_content().startswith(str(live.steps[-1]))
    tab.assert_clean()


def test_dark_theme_follows_the_system(open_tab, artifacts: pathlib.Path) -> None:
    light = open_tab(color_scheme="light")
    dark = open_tab(color_scheme="dark")
    background = "() => getComputedStyle(document.body).backgroundColor"
    assert _luminance(light.frame.evaluate(background)) > 0.8
    assert _luminance(dark.frame.evaluate(background)) < 0.1
    dark.page.screenshot(path=str(artifacts / "gradscope-matrix-dark.png"))
    light.assert_clean()
    dark.assert_clean()


def test_controls_are_reachable_by_keyboard_with_visible_focus(open_tab) -> None:
    tab = open_tab()
    order = []
    for _ in range(4):
        tab.page.keyboard.press("Tab")
        order.append(tab.frame.evaluate("() => document.activeElement.id || document.activeElement.dataset.scope"))
        outline = tab.frame.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
        assert outline != "none", f"no visible focus on {order[-1]}"
    assert order == ["gs-run", "gs-step", "gs-refresh", "online"]
    tab.page.keyboard.press("Enter")  # folds `online`, which has focus
    assert "online/l1" not in tab.visible_scopes()
    tab.assert_clean()


def _luminance(css_colour: str) -> float:
    """Relative luminance of an `rgb(r, g, b)` colour, in [0, 1]."""
    numbers = css_colour[css_colour.index("(") + 1 : css_colour.index(")")].replace(",", " ").split()
    r, g, b = (float(n) / 255 for n in numbers[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b
