"""Two runs side by side: the cells whose flow state differs from the compared
run's are marked, with both states. Runs are the multihead demo's clean and
leaky twins, recorded by the real Recorder."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.frontend_fixtures import TensorBoard
from tests.support.frontend_tab import OpenTab

pytest_plugins = ["tests.support.frontend_fixtures", "tests.support.frontend_tab"]
pytestmark = pytest.mark.browser


def _state(matrix: dict[str, Any], loss: str, scope: str) -> str:
    if loss not in matrix["losses"] or scope not in matrix["scopes"]:
        return "absent"
    return matrix["cells"].get(loss, {}).get(scope, {}).get("state", "no_gradient")


def _differing(shown: dict[str, Any], other: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {
        (loss, scope): _state(other, loss, scope)
        for loss in shown["losses"]
        for scope in shown["scopes"]
        if _state(other, loss, scope) != _state(shown, loss, scope)
    }


@pytest.mark.parametrize(
    ("shown", "other"),
    [("multihead/leaky", "multihead/clean"), ("multihead/clean", "multihead/leaky")],
)
def test_comparison_marks_exactly_the_cells_whose_flow_state_differs(
    open_tab: OpenTab, demo_runs: TensorBoard, shown: str, other: str
) -> None:
    shown_matrix = demo_runs.json("matrix", run=shown)
    other_matrix = demo_runs.json("matrix", run=other, step=str(shown_matrix["step"]))
    expected = _differing(shown_matrix, other_matrix)
    # The leaky twin lets loss2 update the shared trunk; the clean one does not.
    assert ("loss2", "Agent/layer1") in expected
    tab = open_tab(run=shown)
    assert tab.frame.locator('.gs-cell[data-diff="true"]').count() == 0
    tab.frame.locator("#gs-compare").select_option(value=other)
    tab.frame.wait_for_selector("#gs-compare-note")
    marked = tab.frame.locator('.gs-cell[data-diff="true"]').evaluate_all(
        "cs => cs.map(c => [c.dataset.loss, c.dataset.scope, c.dataset.state, c.title])"
    )
    assert {(loss, scope) for loss, scope, _, _ in marked} == set(expected)
    assert tab.frame.locator("#gs-compare-note").get_attribute("data-differ") == str(len(expected))
    for loss, scope, state, title in marked:
        assert state == _state(shown_matrix, loss, scope)
        assert f"in run {other}: {expected[(loss, scope)]}" in title
    tab.cell("loss2", "Agent/layer1").click()
    detail = tab.frame.locator(f'#gs-details dd[data-field="state in {other}"]')
    assert detail.text_content() == expected[("loss2", "Agent/layer1")]
    tab.frame.locator("#gs-compare").select_option(value="")
    tab.frame.wait_for_selector("#gs-compare-note", state="detached")
    assert tab.frame.locator('.gs-cell[data-diff="true"]').count() == 0
    tab.assert_clean()
