"""Names from the logs in the tab: bidi and control characters shown escaped
exactly as the CLI prints them (tb_gradscope.commands.text.safe), long names
ellipsised everywhere with the full escaped name on hover, the page never
wider than the window because of a name, and "Fit" keeping the scope graph
readable. Real TensorBoard, real browser, the hand-written run of
tests/support/frontend_logs.long_names_spec."""

from __future__ import annotations

import pytest

from tb_gradscope.commands.text import safe
from tests.support.frontend_logs import (
    BIDI_LOSS,
    BIDI_SCOPE,
    CONTROL_SCOPE,
    LONG_LOSS,
    LONG_RUN,
    LONG_SCOPE,
    long_names_spec,
)
from tests.support.frontend_tab import OpenTab, Tab, css

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab"]
pytestmark = pytest.mark.browser

# Every piece of text the page shows: text nodes, and the titles and labels
# shown on hover or read out by a screen reader.
SHOWN_TEXT = """() => {
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node !== null; node = walker.nextNode()) {
    // Whitespace between the tags of TensorBoard's own page is not a name.
    if (node.parentElement.closest('style, script') === null && node.textContent.trim() !== '') {
      out.push(['text', node.textContent]);
    }
  }
  for (const element of document.querySelectorAll('[title], [aria-label]')) {
    for (const attr of ['title', 'aria-label']) {
      if (element.hasAttribute(attr)) out.push([attr, element.getAttribute(attr)]);
    }
  }
  return out;
}"""

NO_HORIZONTAL_SCROLL = (
    "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
)


def open_long_names(open_tab: OpenTab) -> Tab:
    """The run open, one hostile cell charted and selected, the blocked edge's op shown."""
    tab = open_tab(run=LONG_RUN)
    tab.frame.locator("#gs-violations tbody tr").first.wait_for()
    tab.cell(BIDI_LOSS, CONTROL_SCOPE).click()
    tab.frame.locator("#gs-series-chart").wait_for()
    tab.frame.locator(".gs-edge-blocked .gs-edge-mark").click()
    tab.frame.locator('#gs-blocked dd[data-field="source"]').wait_for()
    return tab


def test_bidi_and_control_characters_show_escaped_as_the_cli_prints_them(open_tab: OpenTab) -> None:
    tab = open_long_names(open_tab)
    raw = [
        (where, text[:80])
        for where, text in tab.frame.evaluate(SHOWN_TEXT)
        # Tooltips separate their lines with newlines of their own.
        if any(safe(ch) != ch for ch in (text.replace("\n", "") if where == "title" else text))
    ]
    assert raw == [], f"raw control or bidi characters shown: {raw}"
    frame = tab.frame
    assert frame.locator("#gs-run").get_attribute("title") == safe(LONG_RUN)
    assert frame.locator(f'#gs-run option[value="{css(LONG_RUN)}"]').get_attribute("title") == safe(
        LONG_RUN
    )
    assert frame.locator(f'th[data-loss="{css(BIDI_LOSS)}"]').text_content() == safe(BIDI_LOSS)
    bidi_row = tab.row(BIDI_SCOPE).locator(".gs-scope")
    assert bidi_row.locator(".gs-scope-name").text_content() == safe(
        BIDI_SCOPE.removeprefix("net/")
    )
    assert bidi_row.get_attribute("title") == safe(BIDI_SCOPE)
    details = frame.locator("#gs-details")
    assert details.locator('dd[data-field="scope"]').text_content() == safe(CONTROL_SCOPE)
    assert details.locator('dd[data-field="loss"]').text_content() == safe(BIDI_LOSS)
    node = frame.locator(f'.gs-node[data-id="{css(BIDI_SCOPE)}"]')
    assert node.locator("title").text_content() == safe(BIDI_SCOPE)
    assert node.locator("text").text_content() == safe(BIDI_SCOPE)
    blocked = frame.locator("#gs-blocked")
    assert (
        blocked.locator('dd[data-field="source"]').text_content()
        == safe("train\u202eyp.py") + ":3 (step)"
    )
    assert blocked.locator('dd[data-field="op"]').text_content().startswith(safe("stop\u202egrad"))
    events = frame.locator("#gs-violations tbody").text_content()
    for name in (BIDI_SCOPE, CONTROL_SCOPE, BIDI_LOSS, f"never({BIDI_LOSS}, {CONTROL_SCOPE})"):
        assert safe(name) in events, name
    assert safe(f"loss '{BIDI_LOSS}' reaches scope '{BIDI_SCOPE}'") in events
    tab.assert_clean()


def _ellipsised(tab: Tab, selector: str) -> dict:
    """The first match's width, whether its text is cut (scrollWidth > clientWidth), and its title."""
    return tab.frame.locator(selector).first.evaluate(
        "e => ({ width: e.getBoundingClientRect().width, cut: e.scrollWidth > e.clientWidth, title: e.getAttribute('title') })"
    )


def test_long_names_are_ellipsised_with_the_full_name_on_hover(
    open_tab: OpenTab, artifacts
) -> None:
    tab = open_long_names(open_tab)
    spec = long_names_spec()
    run_select = _ellipsised(tab, "#gs-run")
    assert run_select["width"] <= 420 and run_select["title"] == safe(LONG_RUN), run_select
    loss_header = _ellipsised(tab, f'th[data-loss="{css(LONG_LOSS)}"] .gs-name')
    assert (
        loss_header["cut"]
        and loss_header["width"] <= 250
        and loss_header["title"] == safe(LONG_LOSS)
    ), loss_header
    scope_name = _ellipsised(tab, f'tr[data-scope="{css(LONG_SCOPE)}"] .gs-scope-name')
    assert scope_name["cut"] and scope_name["width"] <= 450, scope_name
    assert tab.row(LONG_SCOPE).locator(".gs-scope").get_attribute("title") == safe(LONG_SCOPE)
    # The violations table: every name and message cut to its column, the full text on hover.
    event = spec.events[0]
    row = f'#gs-violations tr[data-name="{css(event.name)}"]'
    name = _ellipsised(tab, f"{row} td:nth-child(3) .gs-name")
    assert name["cut"] and name["title"] == safe(event.name), name
    scope = _ellipsised(tab, f'{row} .gs-concerns .gs-name[title="{css(safe(event.scope))}"]')
    assert scope["cut"], scope
    message = _ellipsised(tab, f"{row} .gs-message")
    assert message["title"] == safe(event.message)
    table = tab.frame.locator("#gs-violations table").evaluate(
        "t => t.getBoundingClientRect().width"
    )
    section = tab.frame.locator("#gs-violations").evaluate("s => s.getBoundingClientRect().width")
    assert table <= section + 1, (table, section)
    # The scope graph's nodes: labels cut in the middle, the full name as their title.
    node = tab.frame.locator(f'.gs-node[data-id="{css(LONG_SCOPE)}"]')
    label = node.locator("text").text_content()
    assert len(label) <= 40 and "…" in label and label.startswith("net/sss"), label
    assert node.locator("title").text_content() == safe(LONG_SCOPE)
    # The charted cell's chip and chart legend, the details heading.
    chip = _ellipsised(tab, "#gs-series .gs-chips .gs-name")
    assert chip["title"] == safe(f"{BIDI_LOSS} × {CONTROL_SCOPE}"), chip
    assert tab.frame.evaluate(NO_HORIZONTAL_SCROLL), tab.frame.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    tab.page.screenshot(path=str(artifacts / "gradscope-long-names.png"), full_page=True)
    tab.assert_clean()


def test_the_page_never_scrolls_sideways_because_of_a_name(open_tab: OpenTab) -> None:
    tab = open_tab(run=LONG_RUN)
    tab.frame.locator("#gs-violations tbody tr").first.wait_for()
    for loss in (LONG_LOSS, BIDI_LOSS):
        for scope in (LONG_SCOPE, BIDI_SCOPE):
            tab.cell(loss, scope).click()
    tab.frame.locator('#gs-series-chart[data-series="4"]').wait_for()
    tab.frame.locator("#gs-graph-loss").select_option(value=LONG_LOSS)
    assert tab.frame.evaluate(NO_HORIZONTAL_SCROLL)
    # A narrower window, once the charts are drawn again for it (Refresh).
    tab.page.set_viewport_size({"width": 900, "height": 800})
    drawn_for_1280 = tab.frame.locator("#gs-series-chart").element_handle()
    tab.frame.locator("#gs-refresh").click()
    tab.frame.wait_for_function("chart => !chart.isConnected", arg=drawn_for_1280)
    tab.frame.locator('#gs-series-chart[data-series="4"]').wait_for()
    assert tab.frame.evaluate(NO_HORIZONTAL_SCROLL), tab.frame.evaluate(
        "() => [document.documentElement.scrollWidth, document.documentElement.clientWidth]"
    )
    tab.assert_clean()


def test_fit_shows_a_graph_with_a_300_character_name_at_a_readable_zoom(open_tab: OpenTab) -> None:
    tab = open_tab(run=LONG_RUN)
    tab.frame.locator(".gs-node").first.wait_for()
    tab.frame.get_by_role("button", name="zoom in").click()
    tab.frame.get_by_role("button", name="fit the graph").click()
    # A label's rendered font size: 12 layout units times the drawing's scale on screen.
    sizes = tab.frame.locator(".gs-node text").evaluate_all(
        "ts => ts.map(t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a)"
    )
    assert len(sizes) == 6 and min(sizes) >= 10, sizes
    tab.assert_clean()
