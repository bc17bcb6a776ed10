"""The anomalies and violations lists and the download links, in a real
browser against a real TensorBoard."""

from __future__ import annotations

import json

import pytest

from tests.support.frontend_fixtures import TensorBoard
from tests.support.frontend_tab import OpenTab

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab"]
pytestmark = pytest.mark.browser

# The CSV header of each route, from docs/HTTP_API.md.
CSV_HEADERS = {
    "matrix": "step,loss,scope,state,static_state,grad_vars,l2,max_abs,nonfinite,zero_frac,violation,update_norm,weight_norm,ratio",
    "run": "scope,parent,depth,leaf",
    "flowgraph": "loss,scope,static_state,blocked_by",
    "drift": "pair,step,scope,drift,distance,online_norm,target_step,tau",
    "conflict": "pair,loss_a,loss_b,step,scope,cosine",
    "events": "step,wall_time,type,name,loss,scope,pair,message,evidence",
}


def test_events_list_the_step_first_seen_and_jump_the_slider_there(
    open_tab: OpenTab, demo_runs: TensorBoard
) -> None:
    run = "ema_lstm/leaky"
    events = demo_runs.json("events", run=run)["events"]
    steps = demo_runs.json("run", run=run)["steps"]
    never = next(e for e in events if e["name"] == "never_synced")
    tab = open_tab(run=run)
    row = tab.frame.locator('#gs-events tr[data-name="never_synced"]')
    row.wait_for()
    cells = row.locator("td").all_text_contents()
    assert cells[:3] == [str(never["step"]), "anomaly", "never_synced"]
    # Its message is shown once: the tracks rule it breaks shows it, the anomaly points there.
    ((index, broken),) = [
        (i, v)
        for i, v in enumerate(demo_runs.json("violations", run=run)["violations"])
        if v["message"] == never["message"]
    ]
    assert cells[4] == f"message under Violations: the violation of {broken['name']}"
    assert (
        tab.frame.locator(f"#gs-violation-{index} .gs-message").text_content() == never["message"]
    )
    # The tab opens at the latest step; the event sends it back to the first kept step at or after it.
    target = min(s for s in steps if s >= never["step"])
    assert target != steps[-1]
    row.locator("td").first.get_by_role("button").click()
    tab.frame.wait_for_function(
        "s => document.querySelector('#gs-matrix').dataset.step === String(s)", arg=target
    )
    assert tab.frame.locator("#gs-step").input_value() == str(steps.index(target))
    assert tab.frame.locator(".gs-step-label").text_content() == str(target)
    tab.assert_clean()


def test_violation_shows_with_the_step_it_was_first_seen(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    (violation,) = tensorboard.json("violations", run="states")["violations"]
    tab = open_tab(run="states")
    row = tab.frame.locator('#gs-violations[data-run="states"] tbody tr')
    row.wait_for()
    assert row.count() == 1
    cells = row.locator("td").all_text_contents()
    assert violation["when"] == f"at step {violation['step']}"
    assert cells[:3] == [violation["when"], "recorded", violation["name"]]
    # Violations are the Violations panel's: the anomalies list does not repeat them.
    assert tab.frame.locator("#gs-events-empty").is_visible()
    tab.select_run("dqn")
    tab.frame.locator('#gs-violations[data-run="dqn"] #gs-violations-empty').wait_for()
    tab.assert_clean()


def test_download_links_give_the_shown_run_and_step_as_csv_and_json(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    steps = tensorboard.json("run", run="dqn")["steps"]
    tab = open_tab()
    slider = tab.frame.locator("#gs-step")
    slider.focus()
    slider.press("Home")
    tab.frame.wait_for_function(
        "s => document.querySelector('#gs-matrix').dataset.step === String(s)", arg=steps[0]
    )
    tab.frame.locator("#gs-export").wait_for()
    links = tab.frame.locator("#gs-export a")
    assert links.count() == 2 * len(CSV_HEADERS)
    for i in range(links.count()):
        link = links.nth(i)
        route = link.evaluate("a => a.closest('li').dataset.route")
        fmt = link.get_attribute("data-format")
        assert link.get_attribute("download").endswith(f".{fmt}")
        response = tab.page.request.get(link.evaluate("a => a.href"))
        assert response.ok, (route, fmt, response.status)
        if fmt == "csv":
            header = response.text().splitlines()[0]
            if route == "drift":
                # dqn has no pair: the backend writes only the key columns then.
                assert CSV_HEADERS[route].startswith(header), header
            else:
                assert header == CSV_HEADERS[route]
            if route == "matrix":
                assert all(
                    line.startswith(f"{steps[0]},") for line in response.text().splitlines()[1:]
                )
        else:
            body = json.loads(response.text())
            assert body["run"] == "dqn"
            if route == "matrix":
                assert body["step"] == steps[0]
    tab.assert_clean()
