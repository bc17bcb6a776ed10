"""The tab looks like TensorBoard: it follows TensorBoard's own theme menu (not
the operating system's prefers-color-scheme) both ways, in TensorBoard's greys,
orange accent, Roboto and run colours. Saves light and dark screenshots
(docs/images/ with $GRADSCOPE_DOC_IMAGES set)."""

from __future__ import annotations

import pathlib

import pytest
from playwright.sync_api import Browser, Frame, Page

from tests.support.frontend_fixtures import TensorBoard
from tests.support.frontend_tab import screenshot, wait_for_plugin_frame, watch

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab"]
pytestmark = pytest.mark.browser

# TensorBoard 2.21's page backgrounds (white, body.dark-mode's #303030) and accents.
TB_LIGHT_BG, TB_DARK_BG = "rgb(255, 255, 255)", "rgb(48, 48, 48)"
TB_LIGHT_ACCENT, TB_DARK_ACCENT = "#f57c00", "#ef6c00"
# TensorBoard's default run palette, first colour (light, dark).
TB_FIRST_RUN_COLOUR = ("#425066", "#8e98a3")


def _choose_tensorboard_theme(page: Page, label: str) -> None:
    """Picks `label` ("Light", "Dark", "Browser default") in TensorBoard's theme menu."""
    page.locator("app-header-dark-mode-toggle button").first.click()
    page.get_by_role("menuitem", name=label).click()


def _tab_theme(frame: Frame) -> dict[str, str]:
    return frame.evaluate("""() => {
      const css = getComputedStyle(document.documentElement);
      return { theme: document.documentElement.dataset.theme, bg: getComputedStyle(document.body).backgroundColor,
               accent: css.getPropertyValue('--accent').trim(), font: getComputedStyle(document.body).fontFamily };
    }""")


def _host_dark(page: Page) -> bool:
    """Whether TensorBoard's page is dark (its own mark: `body.dark-mode`)."""
    return page.evaluate("() => document.body.classList.contains('dark-mode')")


@pytest.mark.parametrize("system", ["light", "dark"])
def test_the_tab_follows_tensorboards_theme_menu_not_the_system(
    browser: Browser, tensorboard: TensorBoard, system: str, artifacts: pathlib.Path
) -> None:
    context = browser.new_context(color_scheme=system, viewport={"width": 1280, "height": 900})
    try:
        page = context.new_page()
        problems = watch(page)
        page.goto(tensorboard.url + "/#gradscope")
        frame = wait_for_plugin_frame(page)
        frame.wait_for_selector("#gs-matrix tbody tr", timeout=30_000)
        frame.locator("#gs-run").select_option(value="dqn")
        frame.wait_for_selector('#gs-matrix[data-run="dqn"]')
        frame.locator('.gs-cell[data-loss="td"][data-scope="online"]').click()  # charts its ‖g‖
        frame.wait_for_selector("#gs-series-chart .gs-swatch")
        # TensorBoard opposite to the system, then back: the tab follows TensorBoard.
        for label, theme, bg, accent in (
            ("Dark", "dark", TB_DARK_BG, TB_DARK_ACCENT)
            if system == "light"
            else ("Light", "light", TB_LIGHT_BG, TB_LIGHT_ACCENT),
            ("Light", "light", TB_LIGHT_BG, TB_LIGHT_ACCENT)
            if system == "light"
            else ("Dark", "dark", TB_DARK_BG, TB_DARK_ACCENT),
        ):
            _choose_tensorboard_theme(page, label)
            frame.wait_for_function(
                "t => document.documentElement.dataset.theme === t", arg=theme, timeout=5_000
            )
            shown = _tab_theme(frame)
            assert _host_dark(page) == (theme == "dark"), label
            assert shown["bg"] == bg, (label, shown)
            assert shown["accent"] == accent, (label, shown)
            assert shown["font"].startswith("Roboto"), shown
            colour = frame.evaluate(
                "() => document.querySelector('#gs-series-chart .gs-swatch')?.style.background ?? null"
            )
            first = TB_FIRST_RUN_COLOUR[1 if theme == "dark" else 0]
            assert colour == _rgb(first), (label, colour)
            if system == "light":
                frame.locator("#gs-matrix").wait_for()
                screenshot(page, artifacts, f"gradscope-{theme}.png")
        assert problems == [], "\n".join(problems)
    finally:
        context.close()


def _rgb(hex_colour: str) -> str:
    r, g, b = (int(hex_colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({r}, {g}, {b})"
