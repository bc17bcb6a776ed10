"""The scope graph of the Gradscope tab, in a real browser on real logs.

DQN and multihead runs are recorded by the real Recorder (the multihead twins
by tb_gradscope.demos); the 500-scope graph is hand-written with the
tb_gradscope.format contract.
"""

from __future__ import annotations

import pathlib

import pytest

from tests.support.frontend_fixtures import REPO, TensorBoard
from tests.support.frontend_tab import OpenTab, Tab, css, screenshot

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab"]
pytestmark = pytest.mark.browser


def _highlighted_scopes(tab: Tab) -> set[str]:
    return set(
        tab.frame.locator('.gs-node[data-kind="scope"][data-highlight="true"]').evaluate_all(
            "ns => ns.map(n => n.dataset.id)"
        )
    )


def _view_box(tab: Tab) -> list[float]:
    return [float(v) for v in tab.frame.locator("#gs-graph-svg").get_attribute("viewBox").split()]


def _choose_loss(tab: Tab, loss: str) -> None:
    tab.frame.locator("#gs-graph-loss").select_option(value=loss)


def test_clicking_the_dqn_blocked_edge_shows_the_stop_gradient_and_its_source_line(
    open_tab: OpenTab, tensorboard: TensorBoard, artifacts: pathlib.Path
) -> None:
    (blocked,) = tensorboard.json("flowgraph", run="dqn")["flowgraph"]["blocked_edges"]
    source = blocked["source"]
    # The recorder attributes the cut to the user's line: DqnTrainer's stop_gradient.
    user_line = (REPO / source["file"]).read_text().splitlines()[source["line"] - 1]
    assert "tf.stop_gradient" in user_line
    tab = open_tab()
    tab.frame.wait_for_selector("#gs-graph-svg")
    edge = tab.frame.locator(
        f'.gs-edge-blocked[data-src="{css(blocked["producer_scope"])}"][data-dst="{css(blocked["consumer_scope"])}"]'
    )
    assert edge.count() == 1
    # Only the blocked edge is dashed and marked.
    assert tab.frame.locator(".gs-edge-blocked").count() == 1
    assert edge.locator(".gs-edge-mark").text_content() == "⊘"
    assert (
        edge.locator(".gs-edge-line").evaluate("p => getComputedStyle(p).strokeDasharray") != "none"
    )
    edge.locator(".gs-edge-mark").click()
    details = tab.frame.locator("#gs-blocked")
    assert details.locator('dd[data-field="op type"]').text_content() == "StopGradient"
    assert details.locator('dd[data-field="op"]').text_content() == blocked["op_name"]
    assert details.locator('dd[data-field="cause"]').text_content().startswith("stop_gradient")
    assert (
        details.locator('dd[data-field="source"]')
        .text_content()
        .startswith(f"{source['file']}:{source['line']}")
    )
    screenshot(tab.frame.locator("#gs-graph"), artifacts, "gradscope-graph.png")
    tab.assert_clean()


def test_blocked_edge_opens_from_the_keyboard(open_tab: OpenTab) -> None:
    tab = open_tab()
    edge = tab.frame.locator(".gs-edge-blocked")
    edge.focus()
    edge.press("Enter")
    assert (
        tab.frame.locator('#gs-blocked dd[data-field="op type"]').text_content() == "StopGradient"
    )
    tab.assert_clean()


def test_td_highlights_the_online_net_it_updates(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    cells = tensorboard.json("matrix", run="dqn")["cells"]["td"]
    tab = open_tab()
    tab.frame.wait_for_selector("#gs-graph-svg")
    _choose_loss(tab, "td")
    nodes = set(
        tab.frame.locator('.gs-node[data-kind="scope"]').evaluate_all(
            "ns => ns.map(n => n.dataset.id)"
        )
    )
    assert _highlighted_scopes(tab) == {s for s in nodes if cells[s]["state"] == "updates"}
    assert _highlighted_scopes(tab) and all(
        s.startswith("online/") for s in _highlighted_scopes(tab)
    )
    assert (
        tab.frame.locator('.gs-node[data-id="loss:td"]').get_attribute("data-highlight") == "true"
    )
    # The blocked edge into td is never highlighted.
    assert tab.frame.locator(".gs-edge-blocked").get_attribute("data-highlight") == "false"
    _choose_loss(tab, "")
    assert _highlighted_scopes(tab) == set()
    tab.assert_clean()


def test_each_multihead_loss_highlights_its_own_head_and_the_shared_trunk(
    open_tab: OpenTab, demo_runs: TensorBoard
) -> None:
    tab = open_tab(run="multihead/leaky")
    tab.frame.wait_for_selector("#gs-graph-svg")
    _choose_loss(tab, "loss1")
    assert _highlighted_scopes(tab) == {"Agent/layer1", "Agent/layer2_1"}
    highlighted_edges = tab.frame.locator('.gs-edge[data-highlight="true"]').evaluate_all(
        "es => es.map(e => [e.dataset.src, e.dataset.dst])"
    )
    assert sorted(highlighted_edges) == [
        ["Agent/layer1", "Agent/layer2_1"],
        ["Agent/layer2_1", "loss:loss1"],
    ]
    _choose_loss(tab, "loss2")
    assert _highlighted_scopes(tab) == {"Agent/layer1", "Agent/layer2_2"}
    # The clean twin keeps loss2 off the trunk (var_list): the trunk is only "ignored".
    tab.select_run("multihead/clean")
    tab.frame.wait_for_selector("#gs-graph-svg")
    _choose_loss(tab, "loss2")
    assert _highlighted_scopes(tab) == {"Agent/layer2_2"}
    assert (
        tab.frame.locator('.gs-node[data-id="Agent/layer1"]').get_attribute("data-flow")
        == "ignored"
    )
    tab.assert_clean()


def test_a_500_scope_graph_starts_folded_and_unfolds_by_depth(
    open_tab: OpenTab, artifacts: pathlib.Path
) -> None:
    tab = open_tab(run="graph500")
    drawing = tab.frame.locator("#gs-graph-svg")
    drawing.wait_for()
    # 10 blocks of 50 layers: readable means folded to the 10 blocks (+ input and loss).
    assert drawing.get_attribute("data-depth") == "1"
    assert tab.frame.locator(".gs-node").count() == 12
    # Each block's chain folds into the block; its edges merge into x -> block -> fit.
    assert tab.frame.locator(".gs-edge").count() == 20
    folded = tab.frame.locator('.gs-node[data-id="block03"] text').text_content()
    assert folded == "block03 (50)"
    depth = tab.frame.locator("#gs-graph-depth")
    depth.fill("2")
    depth.dispatch_event("change")
    tab.frame.wait_for_function(
        "() => document.querySelector('#gs-graph-svg').dataset.depth === '2'"
    )
    assert tab.frame.locator(".gs-node").count() == 502
    assert tab.frame.locator(".gs-edge").count() == 510
    tab.frame.locator("#gs-graph").screenshot(path=str(artifacts / "gradscope-graph-500.png"))
    tab.assert_clean()


def test_graph_pans_and_zooms_by_wheel_drag_buttons_and_keys(open_tab: OpenTab) -> None:
    tab = open_tab()
    drawing = tab.frame.locator("#gs-graph-svg")
    drawing.wait_for()
    fit = _view_box(tab)
    drawing.scroll_into_view_if_needed()
    box = drawing.bounding_box()
    tab.page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    tab.page.mouse.wheel(0, -200)
    tab.frame.wait_for_function(
        f"() => parseFloat(document.querySelector('#gs-graph-svg').getAttribute('viewBox').split(' ')[2]) < {fit[2]}"
    )
    zoomed = _view_box(tab)
    tab.page.mouse.move(box["x"] + 20, box["y"] + 20)
    tab.page.mouse.down()
    tab.page.mouse.move(box["x"] + 120, box["y"] + 60, steps=4)
    tab.page.mouse.up()
    dragged = _view_box(tab)
    assert dragged[0] < zoomed[0] and dragged[1] < zoomed[1]  # content follows the pointer
    drawing.focus()
    drawing.press("0")
    assert _view_box(tab) == fit
    drawing.press("ArrowRight")
    assert _view_box(tab)[0] > fit[0]
    tab.frame.get_by_role("button", name="fit the graph").click()
    tab.frame.get_by_role("button", name="zoom in").click()
    assert _view_box(tab)[2] < fit[2]
    tab.assert_clean()


def test_a_run_without_flowgraph_says_why_and_how_to_get_one(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    info = tensorboard.json("run", run="eager")
    assert info["has_flowgraph"] is False
    assert (
        tensorboard.json("matrix", run="eager")["cells"]["td"]["target/l1"]["state"]
        == "no_gradient"
    )
    tab = open_tab(run="eager")
    note = tab.frame.locator("#gs-no-flowgraph")
    assert note.text_content() == (
        "no FlowGraph: the step was never traced, so blocked and independent cannot be told apart; "
        "trace it once with rec.analyze(step_fn, *example_args) or run the step in tf.function"
    )
    assert tab.cell("td", "target/l1").get_attribute("data-state") == "no_gradient"
    graph = tab.frame.locator("#gs-graph-none")
    graph.wait_for()
    assert (
        "no FlowGraph" in graph.text_content() and "note beside the matrix" in graph.text_content()
    )
    # A run with a FlowGraph has no such note.
    tab.select_run("dqn")
    assert tab.frame.locator("#gs-no-flowgraph").count() == 0
    tab.assert_clean()


LABEL_PX = "t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a"


def test_a_large_graph_opens_readable_on_the_chosen_losss_path(
    open_tab: OpenTab, artifacts: pathlib.Path
) -> None:
    tab = open_tab(run="graph500")
    tab.frame.locator("#gs-graph-svg").wait_for()
    depth = tab.frame.locator("#gs-graph-depth")
    depth.fill("2")
    depth.dispatch_event("change")
    tab.frame.wait_for_function(
        "() => document.querySelector('#gs-graph-svg').dataset.depth === '2'"
    )
    loss = tab.frame.locator('.gs-node[data-id="loss:fit"]')
    assert loss.get_attribute("data-highlight") == "true"
    tab.frame.wait_for_function(
        f"() => ({LABEL_PX})(document.querySelector('.gs-node text')) >= 10"
    )
    # The view holds the loss, where the highlighted path ends.
    x, y, width, height = _view_box(tab)
    rect = loss.locator("rect")
    right, bottom = float(rect.get_attribute("width")), float(rect.get_attribute("height"))
    left, top = (
        float(v) for v in loss.get_attribute("transform")[len("translate(") : -1].split(",")
    )
    assert x <= left and left + right <= x + width and y <= top and top + bottom <= y + height
    tab.frame.locator("#gs-graph").screenshot(
        path=str(artifacts / "gradscope-graph-500-readable.png")
    )
    # Fit shows all 502 nodes, smaller.
    tab.frame.get_by_role("button", name="fit the graph").click()
    assert loss.locator("text").evaluate(LABEL_PX) < 10
    tab.assert_clean()


def _report_blocked_lines(logdir: pathlib.Path, run: str, step: int) -> list[str]:
    """The lines `tb-gradscope report` prints under "blocked edges:" for a run at a step."""
    import argparse
    import io

    from tb_gradscope.commands import report

    out = io.StringIO()
    args = argparse.Namespace(
        logdir=str(logdir), run_name=run, step=step, rules=None, format="text"
    )
    assert report.run(args, out=out, err=io.StringIO()) == 0
    lines = out.getvalue().splitlines()
    start = lines.index("blocked edges:") + 1
    return [line.strip() for line in lines[start : lines.index("", start)]]


@pytest.mark.parametrize("scope", ["target/l1", "target"])
def test_a_blocked_cells_details_say_why_in_reports_words(
    open_tab: OpenTab, tensorboard: TensorBoard, scope: str
) -> None:
    matrix = tensorboard.json("matrix", run="dqn")
    cell = matrix["cells"]["td"][scope]
    assert cell["state"] == "blocked" and cell["blocked_by"]
    (edge,) = tensorboard.json("flowgraph", run="dqn")["flowgraph"]["blocked_edges"]
    printed = _report_blocked_lines(tensorboard.logdir, "dqn", matrix["step"])
    tab = open_tab()
    tab.cell("td", scope).click()
    why = tab.frame.locator("#gs-details #gs-why-blocked")
    cuts = why.locator('dd[data-field="cut"]').all_text_contents()
    fixes = why.locator('dd[data-field="fix"]').all_text_contents()
    assert cuts == [c["line"] for c in cell["blocked_by"]]
    assert fixes == [c["fix"] for c in cell["blocked_by"]]
    # The same text report prints for the run at that step: the op, the cause, file:line, the fix.
    assert [x for pair in zip(cuts, fixes) for x in (pair[0], f"fix: {pair[1]}")] == printed
    source = f"{edge['source']['file']}:{edge['source']['line']}"
    assert f"StopGradient '{edge['op_name']}' (stop_gradient) at {source}" in cuts[0]
    tab.assert_clean()


def _click_along(tab: Tab, edge) -> None:
    """Clicks the edge's line where the pointer meets only its wide invisible
    stroke (not its ⊘ mark, not a node), the first such point from its start."""
    for fraction in (0.1, 0.2, 0.3, 0.4, 0.6, 0.7, 0.8, 0.9):
        found = edge.evaluate(
            """(g, f) => { const path = g.querySelector('.gs-edge-line');
                const at = path.getPointAtLength(path.getTotalLength() * f);
                const p = new DOMPoint(at.x, at.y).matrixTransform(path.getScreenCTM());
                const hit = document.elementFromPoint(p.x, p.y);
                return hit?.getAttribute('class') === 'gs-edge-hit' && hit.closest('.gs-edge') === g ? [p.x, p.y] : null; }""",
            fraction,
        )
        if found is not None:
            tab.page.mouse.click(*found)
            return
    raise AssertionError("no point along the edge reaches its hit stroke")


def test_a_click_anywhere_on_an_edge_selects_it(
    open_tab: OpenTab, tensorboard: TensorBoard
) -> None:
    graph = tensorboard.json("flowgraph", run="dqn")["flowgraph"]
    (blocked,) = graph["blocked_edges"]
    tab = open_tab()
    tab.frame.locator("#gs-graph-svg").scroll_into_view_if_needed()
    edge = tab.frame.locator(".gs-edge-blocked")
    _click_along(tab, edge)  # on the dashed line, not on its ⊘
    assert edge.get_attribute("data-selected") == "true"
    details = tab.frame.locator("#gs-blocked")
    assert details.locator('dd[data-field="report"]').text_content() == blocked["line"]
    assert details.locator('dd[data-field="fix"]').text_content() == blocked["fix"]
    # An edge that cuts nothing is selected too, and says what flows along it.
    plain = tab.frame.locator(
        '.gs-edge[data-blocked="false"][data-src="online/l1"][data-dst="online/l2"]'
    )
    (served,) = [e for e in graph["edges"] if (e["src"], e["dst"]) == ("online/l1", "online/l2")]
    _click_along(tab, plain)
    assert plain.get_attribute("data-selected") == "true"
    assert edge.get_attribute("data-selected") is None
    assert details.locator('dd[data-field="tensors"]').text_content() == str(served["tensors"])
    assert details.locator('dd[data-field="from"]').text_content() == "online/l1"
    tab.assert_clean()
