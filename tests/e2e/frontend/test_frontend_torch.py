"""The Gradscope tab shows a PyTorch run as it shows a TF run: the committed
`torch_dqn` demo (clean and leaky twins) in Chromium, its matrix states, the
numbers of its log, the framework, and the `.detach()` that blocks the target.

The numbers are held to the event file read directly (tb_gradscope.read), not
to the plugin's routes: the tab must show what the PyTorch recorder wrote.
"""

from __future__ import annotations

import pathlib

import pytest
from playwright.sync_api import Browser, Page

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tests.support.frontend_fixtures import DEMO_LOGS, TensorBoard
from tests.support.frontend_tab import ENTRY, css, watch

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab"]
pytestmark = [pytest.mark.browser, pytest.mark.slow]

REPO = pathlib.Path(__file__).resolve().parents[3]
DEMO = "torch_dqn"


@pytest.fixture(scope="module")
def page(browser: Browser, demo_logs_tensorboard: TensorBoard):
    """The tab on the committed demo_logs/, opened directly; its problems list."""
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    page = context.new_page()
    problems = watch(page)
    page.goto(demo_logs_tensorboard.url + ENTRY)
    page.wait_for_selector("#gs-matrix tbody tr", timeout=30_000)
    yield page, problems
    context.close()


def open_run(page: Page, run: str) -> None:
    page.locator("#gs-run").select_option(value=run)
    page.wait_for_function(
        "run => document.querySelector('#gs-matrix')?.dataset.run === run", arg=run
    )
    page.locator("#gs-graph-svg").wait_for()


def state(page: Page, loss: str, scope: str) -> str | None:
    return page.locator(
        f'.gs-cell[data-loss="{css(loss)}"][data-scope="{css(scope)}"]'
    ).get_attribute("data-state")


@pytest.mark.parametrize("twin, target_state", [("clean", fmt.BLOCKED), ("leaky", fmt.UPDATES)])
def test_the_matrix_shows_the_torch_dqn_twins_states_and_the_logs_numbers(page, twin, target_state):
    page, problems = page
    run = f"{DEMO}/{twin}"
    open_run(page, run)
    (logs,) = load_logdir(str(DEMO_LOGS), run=run)
    step = int(page.locator("#gs-matrix").get_attribute("data-step"))
    assert step == logs.steps[-1]
    assert state(page, "td", "online") == fmt.UPDATES
    assert state(page, "td", "target") == target_state
    recorded = logs.grads[step]["td"].row("online")["l2"]
    page.locator('.gs-cell[data-loss="td"][data-scope="online"]').click()
    shown = page.locator('#gs-details dd[data-field="‖g‖ (L2)"]').text_content()
    assert float(shown) == pytest.approx(recorded, rel=5e-6), (shown, recorded)
    assert problems == []


def test_the_scope_graph_says_pytorch_and_names_the_detach_that_blocks_the_target(page):
    page, problems = page
    open_run(page, f"{DEMO}/clean")
    assert page.locator("#gs-graph-framework").text_content().strip() == "traced from PyTorch"
    (logs,) = load_logdir(str(DEMO_LOGS), run=f"{DEMO}/clean")
    edges = logs.flowgraphs[0][1].blocked_edges
    assert edges, "the clean twin's FlowGraph has no blocked edge"
    edge = edges[0]
    page.locator("#gs-graph-loss").select_option(value="td")
    marks = page.locator(".gs-edge-blocked .gs-edge-mark")
    assert marks.count() >= 1
    marks.first.click()
    details = page.locator("#gs-blocked")
    cause = details.locator('dd[data-field="cause"]').first.text_content()
    assert cause.startswith(edge.cause) and ".detach()" in cause and "tf.stop_gradient" not in cause
    source = details.locator('dd[data-field="source"]').first.text_content()
    file, line = source.split(" ")[0].rsplit(":", 1)
    assert file == "tb_gradscope/demos/torch_dqn.py"
    assert ".detach()" in (REPO / file).read_text().splitlines()[int(line) - 1]
    assert problems == []


def test_a_tf_run_keeps_its_own_words(page):
    page, problems = page
    open_run(page, "dqn/clean")
    assert page.locator("#gs-graph-framework").text_content().strip() == "traced from TensorFlow 2"
    page.locator(".gs-edge-blocked .gs-edge-mark").first.click()
    cause = page.locator('#gs-blocked dd[data-field="cause"]').first.text_content()
    assert "tf.stop_gradient" in cause
    assert problems == []
