"""The Gradscope tab's charts (uPlot): chosen cells' ‖g‖ over steps, drift with
anomalies marked, gradient-conflict cosines. Real TensorBoard, real browser;
runs recorded by the real Recorder."""

from __future__ import annotations

import math
import pathlib

import pytest

from tests.support.frontend_fixtures import TensorBoard
from tests.support.frontend_tab import OpenTab, Tab, css, screenshot

# The width of `label` in uPlot's default axis-label font (uPlot.esm.js `labelFont`).
UPLOT_LABEL_WIDTH = """(_, label) => {
  const c = document.createElement('canvas').getContext('2d');
  c.font = 'bold 12px system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", sans-serif';
  return c.measureText(label).width;
}"""

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab"]
pytestmark = pytest.mark.browser


def _legend_last(tab: Tab, chart: str) -> dict[str, float]:
    items = tab.frame.locator(f"#{chart} .gs-chart-legend li").evaluate_all(
        "ls => ls.map(l => [l.dataset.label, l.dataset.last])"
    )
    return {label: float(last) for label, last in items}


def _ema(values: list[float], weight: float) -> float:
    """TensorBoard's debiased exponential moving average, last point."""
    last, count = 0.0, 0
    for value in values:
        last = last * weight + (1 - weight) * value
        count += 1
    return last / (1 - weight**count)


def test_chosen_cells_chart_their_gradient_norm_with_log_scale_and_smoothing(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    series = {
        scope: tensorboard.json(
            "series", run="dqn", kind="grad_stats", name="td", scope=scope, stat="l2"
        )["points"]
        for scope in ("online/l1", "online/l2")
    }
    tab = open_tab()
    # The charts come after the matrix, with the run's FlowGraph, drift and events.
    tab.frame.locator("#gs-series-empty").wait_for()
    tab.cell("td", "online/l1").click()
    tab.cell("td", "online/l2").click()
    chart = tab.frame.locator("#gs-series-chart")
    tab.frame.wait_for_selector('#gs-series-chart[data-series="2"]')
    assert chart.get_attribute("data-points") == str(len(series["online/l1"]))
    assert chart.get_attribute("data-log") == "true"
    assert chart.locator("canvas").count() >= 1
    last = _legend_last(tab, "gs-series-chart")
    for scope, points in series.items():
        assert last[f"td × {scope}"] == pytest.approx(points[-1][2], rel=1e-6)
    smoothing = tab.frame.locator("#gs-smoothing")
    smoothing.fill("0.9")
    tab.frame.wait_for_selector("#gs-series-chart figcaption:has-text('smoothed 0.90')")
    last = _legend_last(tab, "gs-series-chart")
    for scope, points in series.items():
        assert last[f"td × {scope}"] == pytest.approx(_ema([p[2] for p in points], 0.9), rel=1e-6)
    tab.frame.locator("#gs-log").uncheck()
    assert tab.frame.locator("#gs-series-chart").get_attribute("data-log") == "false"
    tab.frame.get_by_role("button", name="stop charting td × online/l1").click()
    assert tab.frame.locator("#gs-series-chart").get_attribute("data-series") == "1"
    tab.assert_clean()


def test_ema_run_without_initial_sync_marks_never_synced_on_its_drift_chart(
    open_tab: OpenTab, demo_runs: TensorBoard, artifacts: pathlib.Path
) -> None:
    run = "ema_lstm/leaky"
    (pair,) = demo_runs.json("drift", run=run)["pairs"]
    anomalies = [e for e in demo_runs.json("events", run=run)["events"] if e["type"] == "anomaly"]
    (never,) = [e for e in anomalies if e["name"] == "never_synced"]
    assert never["pair"] == pair["name"]
    tab = open_tab(run=run)
    chart = tab.frame.locator(f'#gs-drift .gs-chart[data-pair="{css(pair["name"])}"]')
    chart.wait_for()
    # The root first; target/lstm/lstm_cell is all of target/lstm: one line for both.
    drift = pair["values"]["drift"]
    assert drift["target/lstm"] == drift["target/lstm/lstm_cell"] != drift["target"]
    legend = chart.locator(".gs-chart-legend li")
    assert legend.evaluate_all("ls => ls.map(l => l.dataset.label)") == [
        "target",
        "target/lstm",
        "target/v",
    ]
    assert legend.first.get_attribute("class") == "gs-main"
    assert chart.get_attribute("data-series") == "3"
    assert chart.get_attribute("data-points") == str(len(pair["steps"]))
    marker = chart.locator(f'.gs-marker[data-name="never_synced"][data-step="{never["step"]}"]')
    assert marker.text_content() == "never synced"
    assert marker.get_attribute("title") == "never synced: its message is under Violations"
    # The axis says what the route's drift is: distance over online's norm, a relative number.
    assert chart.get_attribute("data-y-label") == "‖θt − θo‖ / ‖θo‖"
    assert "relative drift" in chart.locator("figcaption").text_content()
    # uPlot draws the label on its canvas (bold 12 px), centred on the plot: it must fit its height.
    label_px = chart.evaluate(UPLOT_LABEL_WIDTH, chart.get_attribute("data-y-label"))
    assert label_px <= chart.locator(".u-over").bounding_box()["height"], label_px
    last = [v for v in drift["target"] if v is not None][-1]
    assert float(legend.first.get_attribute("data-last")) == last
    (i,) = [i for i, v in enumerate(drift["target"]) if v == last][-1:]
    assert last == pytest.approx(
        pair["values"]["distance"]["target"][i] / pair["values"]["online_norm"]["target"][i],
        rel=1e-5,
    )
    # The effective tau of the root, as the route gives it at its last step with one.
    taus = [
        (s, v)
        for s, v in zip(pair["steps"], pair["values"]["tau"]["target"])
        if isinstance(v, float)
    ]
    tau = tab.frame.locator(f'#gs-drift .gs-drift-pair[data-pair="{css(pair["name"])}"] .gs-tau')
    assert (int(tau.get_attribute("data-step")), float(tau.get_attribute("data-tau"))) == taus[-1]
    assert tau.text_content().startswith(f"effective τ of target at step {taus[-1][0]}: ")
    assert f"declared τ {pair['attrs']['tau']:g}" in tau.text_content()
    # The marker stands at its step on the x axis: the first step is the plot's left edge.
    over = chart.locator(".u-over").bounding_box()
    left = marker.bounding_box()["x"] - over["x"]
    expected = (
        (never["step"] - pair["steps"][0]) / (pair["steps"][-1] - pair["steps"][0]) * over["width"]
    )
    assert abs(left - expected) <= 3, (left, expected)
    assert "never synced" in chart.locator(".gs-marker-list").text_content()
    screenshot(chart, artifacts, "gradscope-drift.png")
    tab.assert_clean()


def test_a_resnet_sized_pair_draws_its_root_folded_statistics_and_the_scopes_that_drift_most(
    open_tab: OpenTab, tensorboard: TensorBoard, artifacts: pathlib.Path
) -> None:
    (pair,) = tensorboard.json("drift", run="drift_many")["pairs"]
    drift, distance, norm = (pair["values"][c] for c in ("drift", "distance", "online_norm"))
    state = set(pair["attrs"]["state_scopes"])
    trainable = [s for s in pair["scopes"] if s.startswith("target/") and s not in state]
    assert len(pair["scopes"]) == 76 and len(state) == 30 and len(trainable) == 45
    tab = open_tab(run="drift_many")
    chart = tab.frame.locator('#gs-drift .gs-chart[data-pair="target<-online"]')
    chart.wait_for()
    legend = chart.locator(".gs-chart-legend li")
    labels = legend.evaluate_all("ls => ls.map(l => l.dataset.label)")
    assert chart.get_attribute("data-series") == "12" and len(labels) == 12
    # The root first and thicker, then the 30 moving statistics as one line...
    assert labels[0] == "target" and legend.first.get_attribute("class") == "gs-main"
    assert labels[1] == "" and legend.nth(1).text_content().startswith(
        "30 moving statistics, folded"
    )
    last = len(pair["steps"]) - 1
    folded = math.sqrt(sum(distance[s][last] ** 2 for s in state)) / math.sqrt(
        sum(norm[s][last] ** 2 for s in state)
    )
    assert float(legend.nth(1).get_attribute("data-last")) == pytest.approx(folded, rel=1e-6)
    # ...then the ten scopes that drift most.
    most = sorted(trainable, key=lambda s: -max(drift[s]))[:10]
    assert sorted(labels[2:]) == sorted(most)
    screenshot(tab.frame.locator("#gs-drift"), artifacts, "gradscope-drift-resnet.png")
    section = tab.frame.locator('.gs-drift-pair[data-pair="target<-online"]')
    section.locator('input[data-choice="all"]').check()
    tab.frame.wait_for_selector('#gs-drift .gs-chart[data-series="47"]')
    section.locator('input[data-choice="unfoldState"]').check()
    tab.frame.wait_for_selector('#gs-drift .gs-chart[data-series="76"]')
    assert "" not in chart.locator(".gs-chart-legend li").evaluate_all(
        "ls => ls.map(l => l.dataset.label)"
    )
    tab.assert_clean()


def test_a_cell_without_gradient_charts_no_gradient_not_zero(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    cell = tensorboard.json("matrix", run="dqn")["cells"]["td"]["target/l1"]
    assert cell["state"] == "blocked" and cell["grad_vars"] == 0
    # The table stores 0 where no variable received a gradient.
    stored = tensorboard.json(
        "series", run="dqn", kind="grad_stats", name="td", scope="target/l1", stat="l2"
    )["points"]
    assert {p[2] for p in stored} == {0.0}
    tab = open_tab()
    tab.cell("td", "target/l1").click()
    item = tab.frame.locator("#gs-series-chart .gs-chart-legend li")
    item.wait_for()
    assert item.text_content() == "td × target/l1 no gradient"
    assert item.get_attribute("data-last") == ""
    tab.assert_clean()


def test_conflict_cosines_chart_each_pair_of_losses_or_say_there_are_none(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    pairs = tensorboard.json("conflict", run="dqn")["pairs"]
    assert pairs, "the Recorder records td vs aux on the online scopes they share"
    tab = open_tab()
    tab.frame.locator("#gs-conflict .gs-chart").first.wait_for()
    assert tab.frame.locator("#gs-conflict .gs-chart").count() == len(pairs)
    for pair in pairs:
        chart = tab.frame.locator(f'#gs-conflict .gs-chart[data-pair="{css(pair["name"])}"]')
        assert chart.get_attribute("data-series") == str(len(pair["cosine"]))
        last = {
            label: float(value)
            for label, value in chart.locator(".gs-chart-legend li").evaluate_all(
                "ls => ls.map(l => [l.dataset.label, l.dataset.last])"
            )
        }
        for scope, values in pair["cosine"].items():
            finite = [v for v in values if isinstance(v, (int, float))]
            assert last[scope] == pytest.approx(finite[-1], rel=1e-6)
    tab.select_run("states")
    tab.frame.locator("#gs-conflict-empty").wait_for()
    assert tab.frame.locator("#gs-conflict .gs-chart").count() == 0
    tab.assert_clean()
