"""The Gradscope tab in a real browser against a real TensorBoard process.

Each test opens the tab either inside TensorBoard (http://HOST/#gradscope, the
plugin's iframe) or directly (/data/plugin_entry.html?name=gradscope, the page
TensorBoard puts in that iframe), and fails on any console error, uncaught
exception or dialog (a dialog would mean a name from the logs ran as HTML).
"""

from __future__ import annotations

import math
import pathlib

import pytest
from playwright.sync_api import Browser, expect

from tests.support.frontend_fixtures import Logs, TensorBoard
from tests.support.frontend_logs import (
    DQN_LOSSES,
    DQN_SCOPES,
    HOSTILE,
    hostile_spec,
    states_spec,
    unrecorded_spec,
    wide_spec,
)
from tests.support.frontend_tab import ENTRY, OpenTab, css, screenshot, wait_for_plugin_frame, watch

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab"]
pytestmark = pytest.mark.browser


def test_tab_loads_inside_tensorboard_without_console_errors(
    open_tab: OpenTab, artifacts: pathlib.Path
) -> None:
    tab = open_tab(embedded=True)
    # Our guest side of TensorBoard's message channel got an answer.
    tab.frame.wait_for_selector('#gradscope[data-host="tensorboard"]', timeout=10_000)
    runs = tab.frame.locator("#gs-run option").evaluate_all("os => os.map(o => o.value)")
    # scalars_only has no gradscope data; other modules' sessions add more runs.
    assert {HOSTILE, "dqn", "live", "states", "wide", "graph500"} <= set(runs)
    assert "scalars_only" not in runs
    # The README's first picture: a blocked cell selected, its details saying why.
    tab.cell("td", "target").click()
    tab.frame.wait_for_selector('#gs-details #gs-why-blocked dd[data-field="cut"]')
    tab.page.screenshot(path=str(artifacts / "gradscope-in-tensorboard.png"), full_page=True)
    screenshot(tab.page, artifacts, "gradscope-matrix.png")
    tab.assert_clean()


def test_silent_host_page_falls_back_to_polling(browser: Browser, tensorboard: TensorBoard) -> None:
    # An iframe whose parent is not TensorBoard: the bootstrap gets no answer.
    context = browser.new_context()
    try:
        page = context.new_page()
        problems = watch(page)
        page.set_content(
            f'<iframe src="{tensorboard.url}{ENTRY}" width="1000" height="600"></iframe>'
        )
        frame = wait_for_plugin_frame(page)
        frame.wait_for_selector("#gs-matrix tbody tr", timeout=30_000)
        frame.wait_for_selector('#gradscope[data-host="polling"]', timeout=15_000)
        # No host to hear from: its own status poll keeps it live.
        assert "this tab checks every 2 s" in frame.locator(".gs-status").text_content()
        assert problems == []
    finally:
        context.close()


def test_td_loss_updates_online_scopes_and_blocks_target(
    open_tab: OpenTab, artifacts: pathlib.Path
) -> None:
    tab = open_tab()
    assert tab.visible_scopes() == list(DQN_SCOPES)
    headers = tab.frame.locator("#gs-matrix thead th[data-loss]").all_text_contents()
    assert sorted(headers) == sorted(DQN_LOSSES)
    for scope in DQN_SCOPES:
        expected = "updates" if scope.startswith("online") else "blocked"
        assert tab.cell("td", scope).get_attribute("data-state") == expected, scope
    # aux penalises online/l1 activity: it does not depend on online/l2 at all.
    assert tab.cell("aux", "online/l2").get_attribute("data-state") == "independent"
    tab.frame.locator("#gs-matrix").screenshot(path=str(artifacts / "gradscope-matrix-only.png"))
    tab.page.screenshot(path=str(artifacts / "gradscope-matrix-direct.png"))
    tab.assert_clean()


def test_updates_are_shaded_by_gradient_norm(open_tab: OpenTab, tensorboard: TensorBoard) -> None:
    cells = tensorboard.json("matrix", run="dqn")["cells"]
    updating = [
        (c["l2"], loss, scope)
        for loss, row in cells.items()
        for scope, c in row.items()
        if c["state"] == "updates"
    ]
    _, low_loss, low_scope = min(updating)
    _, high_loss, high_scope = max(updating)
    tab = open_tab()
    colour = "b => getComputedStyle(b).backgroundColor"
    darkest = tab.cell(high_loss, high_scope).evaluate(colour)
    lightest = tab.cell(low_loss, low_scope).evaluate(colour)
    assert _luminance(darkest) < _luminance(lightest), (darkest, lightest)
    tab.assert_clean()


def test_folding_a_scope_rolls_its_children_up(open_tab: OpenTab, tensorboard: TensorBoard) -> None:
    served = tensorboard.json("matrix", run="dqn")["cells"]["td"]
    # The roll-up row combines its children: ||g_online||^2 = sum of theirs.
    children = math.hypot(served["online/l1"]["l2"], served["online/l2"]["l2"])
    assert math.isclose(served["online"]["l2"], children, rel_tol=1e-4)
    tab = open_tab()
    toggle = tab.row("online").locator("button.gs-scope")
    assert toggle.get_attribute("aria-expanded") == "true"
    toggle.click()
    assert tab.visible_scopes() == ["online", "target", "target/l1", "target/l2"]
    assert tab.row("online").get_attribute("data-folded") == "true"
    assert tab.row("online").locator("button.gs-scope").get_attribute("aria-expanded") == "false"
    assert tab.cell("td", "online").get_attribute("data-state") == "updates"
    assert math.isclose(
        float(tab.cell("td", "online").text_content()), served["online"]["l2"], rel_tol=0.05
    )
    # Enter on the focused toggle unfolds it again.
    tab.row("online").locator("button.gs-scope").press("Enter")
    assert tab.visible_scopes() == list(DQN_SCOPES)
    tab.assert_clean()


def test_clicking_a_cell_shows_all_its_numbers(open_tab: OpenTab, tensorboard: TensorBoard) -> None:
    matrix = tensorboard.json("matrix", run="dqn")
    served, update = matrix["cells"]["td"]["online/l2"], matrix["updates"]["online/l2"]
    tab = open_tab()
    title = tab.cell("td", "online/l2").get_attribute("title")
    assert "‖g‖" in title and "state: updates" in title
    tab.cell("td", "online/l2").click()
    assert tab.cell("td", "online/l2").get_attribute("aria-pressed") == "true"
    details = tab.frame.locator("#gs-details")

    def field(name: str) -> str:
        return details.locator(f'dd[data-field="{name}"]').text_content()

    assert field("state") == served["state"] == "updates"
    assert field("static state") == served["static_state"]
    assert int(field("variables with gradient")) == served["grad_vars"] == 2
    assert field("step") == str(matrix["step"])
    for label, value in [
        ("‖g‖ (L2)", served["l2"]),
        ("max |g|", served["max_abs"]),
        ("zero fraction", served["zero_frac"]),
        ("‖Δθ‖ applied", update["update_norm"]),
        ("‖θ‖", update["weight_norm"]),
        ("‖Δθ‖/‖θ‖", update["ratio"]),
    ]:
        assert math.isclose(float(field(label)), value, rel_tol=1e-5, abs_tol=1e-12), label
    # The extra columns show the scope's applied update next to the losses.
    ratio = tab.row("online/l2").locator('td[data-column="ratio"]').text_content()
    assert math.isclose(float(ratio), update["ratio"], rel_tol=0.05)
    assert tab.row("target/l1").locator('td[data-column="update_norm"]').text_content() == "0"
    tab.assert_clean()


def test_a_cell_without_max_abs_and_zero_frac_says_not_recorded(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    spec = unrecorded_spec()
    grad_vars, l2, max_abs, _, zero_frac = spec.grads["fit"]["net/dense"]
    assert math.isnan(max_abs) and math.isnan(zero_frac) and grad_vars > 0
    served = tensorboard.json("matrix", run=spec.name)["cells"]["fit"]
    assert (served["net/dense"]["max_abs"], served["net/dense"]["zero_frac"]) == (None, None)
    tab = open_tab(run=spec.name)
    title = tab.cell("fit", "net/dense").get_attribute("title").splitlines()
    assert "max |g|: not recorded" in title and "zero fraction: not recorded" in title
    tab.cell("fit", "net/dense").click()
    details = tab.frame.locator("#gs-details")

    def field(name: str) -> str:
        return details.locator(f'dd[data-field="{name}"]').text_content()

    assert (field("max |g|"), field("zero fraction")) == ("not recorded", "not recorded")
    assert math.isclose(float(field("‖g‖ (L2)")), l2, rel_tol=1e-6)
    assert int(field("variables with gradient")) == grad_vars
    # A cell of the same run that recorded them shows their numbers.
    _, _, max_abs, _, zero_frac = spec.grads["fit"]["net/kept"]
    tab.cell("fit", "net/kept").click()
    assert math.isclose(float(field("max |g|")), max_abs, rel_tol=1e-6)
    assert float(field("zero fraction")) == zero_frac
    tab.assert_clean()


def test_an_update_not_measured_says_not_measured(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    """A TF1 step written before a train op ran reads ‖Δθ‖ NaN, "not measured"
    (docs/FORMAT.md): the ‖Δθ‖ and ‖Δθ‖/‖θ‖ columns, their tooltip and the
    details panel say so in words; weights gone NaN still show "NaN"."""
    spec = unrecorded_spec()
    served = tensorboard.json("matrix", run=spec.name)["updates"]
    assert served["net/late"]["measured"] is False and served["net/diverged"]["measured"] is True
    tab = open_tab(run=spec.name)
    late, diverged = tab.row("net/late"), tab.row("net/diverged")
    for column in ("update_norm", "ratio"):
        shown = late.locator(f'td[data-column="{column}"]')
        assert shown.text_content() == "not measured", column
        assert "‖Δθ‖: not measured" in shown.get_attribute("title").splitlines()
        assert diverged.locator(f'td[data-column="{column}"]').text_content() in ("NaN", "–")
    assert diverged.locator('td[data-column="update_norm"]').text_content() == "NaN"
    tab.cell("fit", "net/late").click()
    details = tab.frame.locator("#gs-details")

    def field(name: str) -> str:
        return details.locator(f'dd[data-field="{name}"]').text_content()

    assert (field("‖Δθ‖ applied"), field("‖Δθ‖/‖θ‖")) == ("not measured", "not measured")
    assert float(field("‖θ‖")) == spec.updates["net/late"][1]
    tab.cell("fit", "net/diverged").click()
    assert field("‖Δθ‖ applied") == "NaN"
    tab.assert_clean()


def test_step_slider_moves_over_kept_steps(open_tab: OpenTab, tensorboard: TensorBoard) -> None:
    steps = tensorboard.json("run", run="dqn")["steps"]
    first = tensorboard.json("matrix", run="dqn", step=str(steps[0]))["cells"]["td"]["online/l1"][
        "l2"
    ]
    tab = open_tab()
    slider = tab.frame.locator("#gs-step")
    assert slider.get_attribute("max") == str(len(steps) - 1)
    assert tab.frame.locator("output.gs-step-label").text_content() == f"{steps[-1]} (latest)"
    slider.focus()
    slider.press("Home")
    tab.frame.wait_for_selector(f'#gs-matrix[data-step="{steps[0]}"]')
    assert tab.frame.locator("output.gs-step-label").text_content() == str(steps[0])
    assert math.isclose(float(tab.cell("td", "online/l1").text_content()), first, rel_tol=0.05)
    slider.press("ArrowRight")
    tab.frame.wait_for_selector(f'#gs-matrix[data-step="{steps[1]}"]')
    tab.assert_clean()


def test_every_flow_state_has_its_own_look(
    open_tab: OpenTab, tensorboard: TensorBoard, artifacts: pathlib.Path
) -> None:
    spec = states_spec()
    served = tensorboard.json("matrix", run=spec.name)["cells"]
    expected = {scope.rpartition("/")[2]: scope for scope in spec.scopes if "/" in scope}
    # The backend's rule gives each leaf the state it is named after.
    assert {name: served["main"][scope]["state"] for name, scope in expected.items()} == {
        name: name for name in expected
    }
    tab = open_tab(run=spec.name)
    looks = {}
    for loss, row in served.items():
        for scope, cell in row.items():
            button = tab.cell(loss, scope)
            assert button.get_attribute("data-state") == cell["state"], (loss, scope)
            assert button.get_attribute("data-violation") == str(cell["violation"]).lower()
            look = button.evaluate(
                "b => getComputedStyle(b).backgroundImage + getComputedStyle(b).backgroundColor"
            )
            looks.setdefault(cell["state"], set()).add(look)
    assert set(looks) == {"updates", "ignored", "blocked", "vanishing", "nonfinite", "no_gradient"}
    assert len({min(v) for v in looks.values()}) == len(looks), looks
    assert served["main"]["net/updates"]["violation"] is True
    outline = tab.cell("main", "net/updates").evaluate("b => getComputedStyle(b).outlineStyle")
    assert outline == "solid"
    assert tab.cell("main", "net/nonfinite").text_content() == "NaN"
    # The run says main is a start point; its column header says so too.
    assert {"name": "main", "kind": "start_point"} in tensorboard.json("run", run=spec.name)[
        "losses"
    ]
    assert "start point" in tab.frame.locator('th[data-loss="main"]').get_attribute("title")
    assert tab.frame.locator('th[data-loss="probe"]').get_attribute("title") is None
    tab.page.screenshot(path=str(artifacts / "gradscope-states.png"))
    tab.assert_clean()


def test_ten_thousand_scopes_start_folded_and_unfold_one_scope_at_a_time(
    open_tab: OpenTab, artifacts: pathlib.Path
) -> None:
    # How fast the switch and the unfold are is bench/bench_frontend.py's
    # (`wide_10k_scopes_switch_s`, `wide_10k_scopes_unfold_s`).
    spec = wide_spec()
    tab = open_tab()
    tab.select_run(spec.name)
    # Only the two top levels are drawn until the user unfolds deeper.
    shown = tab.visible_scopes()
    assert shown == [s for s in spec.scopes if s.count("/") < 2]
    assert len(spec.scopes) > 10_000 and len(shown) == 520
    tab.row("block03/layer07").locator("button.gs-scope").click()
    assert len(tab.visible_scopes()) == 540
    assert tab.cell("value", "block03/layer07/unit05").get_attribute("data-state") == "updates"
    # The loss headers stay in view while the 540 rows scroll under them.
    tab.row("block19/layer24").scroll_into_view_if_needed()
    header_top = tab.frame.locator('th[data-loss="value"]').evaluate(
        "e => e.getBoundingClientRect().top"
    )
    table_top = tab.frame.locator(".gs-matrix-wrap").evaluate("e => e.getBoundingClientRect().top")
    assert abs(header_top - table_top) < 4
    tab.page.screenshot(path=str(artifacts / "gradscope-wide.png"))
    tab.assert_clean()


def test_the_filter_box_shows_matching_scopes_with_their_ancestors(open_tab: OpenTab) -> None:
    spec = wide_spec()
    tab = open_tab()
    tab.select_run(spec.name)
    box = tab.frame.locator("#gs-filter")
    count = tab.frame.locator("#gs-filter-count")
    rows = tab.frame.locator("#gs-matrix tbody tr")
    box.press_sequentially("BLOCK03/layer07/")  # any case; the matrix redraws once typing pauses
    expect(count).to_have_text(f"22 of {len(spec.scopes)} scopes shown")
    units = [s for s in spec.scopes if s.startswith("block03/layer07/")]
    assert tab.visible_scopes() == ["block03", "block03/layer07", *units] and len(units) == 20
    assert tab.frame.evaluate("() => document.activeElement.id") == "gs-filter"  # typing goes on
    assert tab.cell("value", units[0]).get_attribute("data-state") == "updates"
    box.fill("")
    expect(rows).to_have_count(520)
    assert count.text_content() == ""
    tab.cell("value", "block03/layer07").click()
    assert (
        tab.frame.locator('#gs-details dd[data-field="scope"]').text_content() == "block03/layer07"
    )
    box.fill("no such scope")
    expect(count).to_have_text(f"0 of {len(spec.scopes)} scopes shown")
    assert tab.visible_scopes() == []
    # Nothing matches: the tab says so in the filter's own words, and the hidden cell leaves the Details.
    assert (
        tab.frame.locator("#gs-filter-none").text_content()
        == f"no scope matches '{box.input_value()}'"
    )
    assert tab.frame.locator("#gs-matrix").is_hidden()
    assert (
        tab.frame.locator("#gs-details").text_content()
        == "DetailsSelect a cell to see all its numbers."
    )
    # A filter that hides the selected cell clears the Details too.
    box.fill("")
    expect(rows).to_have_count(520)
    tab.cell("value", "block03/layer07").click()
    assert (
        tab.frame.locator('#gs-details dd[data-field="scope"]').text_content() == "block03/layer07"
    )
    box.fill("block04/")
    expect(count).not_to_have_text("")
    assert tab.frame.locator("#gs-filter-none").count() == 0
    assert tab.frame.locator('#gs-details dd[data-field="scope"]').count() == 0
    tab.assert_clean()


def test_names_from_logs_render_as_text(open_tab: OpenTab, artifacts: pathlib.Path) -> None:
    spec = hostile_spec()
    tab = open_tab(embedded=True, run=HOSTILE)
    assert tab.frame.locator("#gs-run").input_value() == HOSTILE
    header = tab.frame.locator("#gs-matrix thead th[data-loss]").first.text_content()
    assert header == HOSTILE
    leaf = spec.scopes[-1]
    assert tab.row(leaf).locator(".gs-scope").text_content().endswith(HOSTILE)
    tab.cell(HOSTILE, leaf).click()
    assert tab.frame.locator('#gs-details dd[data-field="scope"]').text_content() == leaf
    # The scope graph, the blocked edge's op and source, and the violations list: text too.
    assert (
        tab.frame.locator(f'.gs-node[data-id="loss:{css(HOSTILE)}"] text').text_content() == HOSTILE
    )
    tab.frame.locator(".gs-edge-blocked .gs-edge-mark").click()
    blocked = tab.frame.locator("#gs-blocked")
    assert blocked.locator('dd[data-field="op"]').text_content() == HOSTILE
    assert (
        blocked.locator('dd[data-field="source"]').text_content() == f"{HOSTILE}.py:7 ({HOSTILE})"
    )
    assert tab.frame.locator("#gs-violations tbody td").all_text_contents()[2] == HOSTILE
    assert tab.frame.locator("img").count() == 0
    tab.page.wait_for_timeout(300)  # an onerror handler would have fired by now
    tab.page.screenshot(path=str(artifacts / "gradscope-hostile-names.png"))
    tab.assert_clean()


def test_tensorboard_reload_refreshes_the_tab(
    open_tab: OpenTab, tensorboard: TensorBoard, gradscope_logs: Logs
) -> None:
    tab = open_tab(embedded=True, run="live")
    assert tab.frame.locator("#gs-step").get_attribute("max") == "1"  # steps 0 and 10
    gradscope_logs.live.train(20)  # records steps 20 and 30
    tensorboard.wait_for_steps("live", 4)
    # TensorBoard's reload broadcasts experimental.DataReloaded to the iframe.
    tab.page.locator("app-header-reload button.reload-button").click()
    # (TensorBoard's own 30 s auto-reload would send it too: allow for that.)
    tab.frame.wait_for_selector('#gs-step[max="3"]', timeout=40_000)
    assert tab.frame.locator("output.gs-step-label").text_content() == "30 (latest)"
    tab.assert_clean()


def test_opened_alone_the_tab_follows_the_system_in_tensorboards_greys(
    open_tab: OpenTab, artifacts: pathlib.Path
) -> None:
    """Outside TensorBoard's page there is no theme menu to follow: the system's
    setting decides, in TensorBoard's own palette (#303030 dark page)."""
    light = open_tab(color_scheme="light")
    dark = open_tab(color_scheme="dark")
    background = "() => getComputedStyle(document.body).backgroundColor"
    assert _luminance(light.frame.evaluate(background)) > 0.8
    assert dark.frame.evaluate(background) == "rgb(48, 48, 48)"
    dark.page.screenshot(path=str(artifacts / "gradscope-matrix-dark.png"))
    light.assert_clean()
    dark.assert_clean()


def test_controls_are_reachable_by_keyboard_with_visible_focus(open_tab: OpenTab) -> None:
    tab = open_tab()
    # The focused control: its id, or "loss|scope" for the matrix's buttons.
    focused = "() => { const e = document.activeElement; return e.id || `${e.dataset.loss ?? ''}|${e.dataset.scope}`; }"
    order = []
    for _ in range(6):
        tab.page.keyboard.press("Tab")
        order.append(tab.frame.evaluate(focused))
        outline = tab.frame.evaluate("() => getComputedStyle(document.activeElement).outlineStyle")
        assert outline != "none", f"no visible focus on {order[-1]}"
    assert order == ["gs-run", "gs-compare", "gs-step", "gs-refresh", "gs-filter", "|online"]
    # The matrix is one tab stop: the next Tab leaves it.
    tab.page.keyboard.press("Tab")
    assert tab.frame.evaluate(
        "() => !document.querySelector('#gs-matrix').contains(document.activeElement)"
    )
    tab.page.keyboard.press("Shift+Tab")
    assert tab.frame.evaluate(focused) == "|online"
    # Arrow keys move inside it; Enter selects a cell, or folds a scope.
    for key, expected in [
        ("ArrowRight", "aux|online"),
        ("ArrowDown", "aux|online/l1"),
        ("ArrowRight", "td|online/l1"),
        ("ArrowLeft", "aux|online/l1"),
        ("ArrowLeft", "aux|online/l1"),
        ("ArrowRight", "td|online/l1"),
    ]:
        tab.page.keyboard.press(key)
        assert tab.frame.evaluate(focused) == expected, key
    tab.page.keyboard.press("Enter")
    assert tab.frame.locator('#gs-details dd[data-field="scope"]').text_content() == "online/l1"
    assert tab.frame.evaluate(focused) == "td|online/l1"
    tab.page.keyboard.press("ArrowUp")
    tab.page.keyboard.press("Home")
    assert tab.frame.evaluate(focused) == "|online"
    tab.page.keyboard.press("Enter")
    assert "online/l1" not in tab.visible_scopes()
    assert tab.frame.evaluate(focused) == "|online"
    tab.assert_clean()


def _luminance(css_colour: str) -> float:
    """Relative luminance of an `rgb(r, g, b)` colour, in [0, 1]."""
    numbers = (
        css_colour[css_colour.index("(") + 1 : css_colour.index(")")].replace(",", " ").split()
    )
    r, g, b = (float(n) / 255 for n in numbers[:3])
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def test_a_data_reload_keeps_the_keyboard_focus(open_tab: OpenTab) -> None:
    """A reload rebuilds the matrix and redraws the panels below it; the control
    focused in either keeps the focus (a reload mid-navigation lost it)."""
    tab = open_tab()
    focused = "() => { const e = document.activeElement; return e.id || `${e.dataset.loss ?? ''}|${e.dataset.scope}`; }"
    tab.frame.locator('.gs-cell[data-loss="td"]').first.focus()
    cell = tab.frame.evaluate(focused)
    with tab.page.expect_response(lambda r: "/matrix" in r.url):
        tab.frame.evaluate("() => document.getElementById('gs-refresh').click()")
    tab.page.wait_for_timeout(1000)
    assert cell.startswith("td|") and tab.frame.evaluate(focused) == cell

    tab.frame.wait_for_selector(".gs-wide button, .gs-wide input, .gs-wide a[href]", timeout=30_000)
    tab.frame.locator(".gs-wide button, .gs-wide input, .gs-wide a[href]").first.focus()
    before = tab.frame.evaluate("() => document.activeElement.outerHTML.slice(0, 120)")
    with tab.page.expect_response(lambda r: "/matrix" in r.url):
        tab.frame.evaluate("() => document.getElementById('gs-refresh').click()")
    tab.page.wait_for_timeout(1000)  # the panels below are redrawn after the matrix
    assert tab.frame.evaluate("() => document.activeElement !== document.body")
    assert tab.frame.evaluate("() => document.activeElement.outerHTML.slice(0, 120)") == before
    tab.assert_clean()
