"""The tab at ResNet-50 scale: a real keras ResNet50 with an EMA twin and two
losses (tests/support/frontend_resnet.py), in a real browser against its own TensorBoard.

The tab opens on the ResNet run; the drift panel draws at most 12 series by
default; the scope graph opens with node labels at least 10 px tall; the
Findings and Violations panels agree with doctor and check. How fast the
matrix first renders against the Scalars tab at this scale is
bench/bench_frontend.py's (`resnet50_first_render_gradscope_over_scalars`),
not a timed assertion here.
Screenshots of the four panels go to test-artifacts/ (and docs/images/ with
$GRADSCOPE_DOC_IMAGES set).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Frame, Page

from tests.support.frontend_fixtures import TensorBoard
from tests.support.frontend_resnet import RUN
from tests.support.frontend_tab import screenshot, wait_for_plugin_frame, watch

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab", "tests.support.frontend_resnet"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

MAX_DRIFT_SERIES = 12
LABEL_PX = "t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a"
VIEWPORT = {"width": 1280, "height": 900}


@pytest.fixture(scope="module")
def resnet_tab(
    browser: Browser, resnet_tensorboard: TensorBoard
) -> Iterator[tuple[Page, Frame, list[str]]]:
    """The tab inside TensorBoard on the ResNet-50 run, every panel loaded."""
    context = browser.new_context(viewport=VIEWPORT)
    try:
        page = context.new_page()
        problems = watch(page)
        page.goto(resnet_tensorboard.url + "/#gradscope")
        frame = wait_for_plugin_frame(page)
        frame.wait_for_selector("#gs-matrix tbody tr", timeout=60_000)
        frame.locator(f'#gs-findings[data-run="{RUN}"]').wait_for(timeout=60_000)
        frame.locator("#gs-graph-svg").wait_for()
        frame.locator("#gs-drift .gs-chart").first.wait_for()
        yield page, frame, problems
    finally:
        context.close()


def test_the_tab_opens_on_the_resnet_run_and_draws_its_matrix(resnet_tab) -> None:
    _, frame, problems = resnet_tab
    assert frame.locator("#gs-matrix").get_attribute("data-run") == RUN
    assert frame.locator("#gs-matrix tbody tr").count() > 1
    assert problems == [], problems


def test_drift_panel_draws_at_most_twelve_series_by_default(resnet_tab) -> None:
    _, frame, problems = resnet_tab
    charts = frame.locator("#gs-drift .gs-chart")
    assert charts.count() >= 1
    for i in range(charts.count()):
        chart = charts.nth(i)
        drawn = int(chart.get_attribute("data-series"))
        assert 1 < drawn <= MAX_DRIFT_SERIES
        assert chart.locator(".gs-chart-legend li").count() == drawn
    # The pair has 213 rows (106 of them BatchNorm moving statistics): most stay folded.
    assert problems == [], problems


def test_scope_graph_opens_with_labels_at_least_ten_pixels(resnet_tab) -> None:
    _, frame, problems = resnet_tab
    svg = frame.locator("#gs-graph-svg")
    # Keras names ResNet50's layers flat (online/conv2_block1_1_conv, ...): 2 levels, 200+ scopes
    # at the second, so the graph opens folded to the networks, the losses and the inputs.
    assert svg.get_attribute("data-depth") == "1"
    frame.wait_for_function(f"() => ({LABEL_PX})(document.querySelector('.gs-node text')) >= 10")
    assert min(frame.locator(".gs-node text").evaluate_all(f"ts => ts.map({LABEL_PX})")) >= 10
    # Unfolded to every layer, it opens again where labels stay readable, on the chosen loss's path.
    depth = frame.locator("#gs-graph-depth")
    depth.fill("2")
    depth.dispatch_event("change")
    frame.wait_for_function("() => document.querySelector('#gs-graph-svg').dataset.depth === '2'")
    assert int(svg.get_attribute("data-nodes")) > 200
    frame.wait_for_function(f"() => ({LABEL_PX})(document.querySelector('.gs-node text')) >= 10")
    depth.fill("1")
    depth.dispatch_event("change")
    frame.wait_for_function("() => document.querySelector('#gs-graph-svg').dataset.depth === '1'")
    assert problems == [], problems


def test_findings_and_violations_agree_with_the_command_line(
    resnet_tab, resnet_tensorboard: TensorBoard
) -> None:
    import argparse
    import io
    import json

    from tb_gradscope.commands import check, doctor

    _, frame, problems = resnet_tab
    out = io.StringIO()
    doctor.run(
        argparse.Namespace(logdir=str(resnet_tensorboard.logdir), run_name=RUN, format="json"),
        out=out,
        err=io.StringIO(),
    )
    (found,) = json.loads(out.getvalue())["runs"]
    out = io.StringIO()
    check.run(
        argparse.Namespace(
            logdir=str(resnet_tensorboard.logdir), rules=None, run_name=RUN, format="json"
        ),
        out=out,
        err=io.StringIO(),
    )
    (checked,) = json.loads(out.getvalue())["runs"]
    shown = frame.locator(".gs-finding").evaluate_all(
        "ls => ls.map(l => [l.dataset.kind, l.dataset.loss, l.dataset.scope, l.dataset.rule])"
    )
    assert shown == [[f["kind"], f["loss"], f["scope"], f["rule"]] for f in found["findings"]]
    assert found["findings"] == [], [
        (f["kind"], f["loss"], f["scope"]) for f in found["findings"]
    ]  # a correct run
    panel = frame.locator(f'#gs-violations[data-run="{RUN}"]')
    rows = panel.locator("tbody tr").evaluate_all(
        "rs => rs.map(r => [r.dataset.name, Number(r.dataset.step), r.dataset.source])"
    )
    assert rows == [[v["name"], v["step"], v["source"]] for v in checked["violations"]]
    assert checked["violations"] == [], checked["violations"]
    assert panel.locator("#gs-violations-rules code").all_text_contents() == checked["rules"]
    assert problems == [], problems


def test_screenshots_of_the_four_panels(resnet_tab, artifacts) -> None:
    page, frame, problems = resnet_tab
    screenshot(frame.locator(".gs-matrix-wrap"), artifacts, "resnet50-matrix.png")
    screenshot(frame.locator("#gs-graph"), artifacts, "resnet50-graph.png")
    screenshot(frame.locator("#gs-drift"), artifacts, "resnet50-drift.png")
    screenshot(frame.locator("#gs-findings-box"), artifacts, "resnet50-findings.png")
    for name in ("matrix", "graph", "drift", "findings"):
        assert (artifacts / f"resnet50-{name}.png").stat().st_size > 1000
    assert problems == [], problems
