"""The flow-state combination rule of a (loss, scope) cell."""

from __future__ import annotations

import inspect
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tb_gradscope import format as fmt
from tb_gradscope.read.flowstate import CELL_STATES, NO_GRADIENT, VANISHING_L2, cell_state


def grad(grad_vars=2.0, l2=1.0, nonfinite=0.0) -> dict[str, float]:
    return {
        "grad_vars": grad_vars,
        "l2": l2,
        "max_abs": l2,
        "nonfinite": nonfinite,
        "zero_frac": 0.0,
    }


@pytest.mark.parametrize(
    "static,expected",
    [
        (fmt.BLOCKED, fmt.BLOCKED),
        (fmt.INDEPENDENT, fmt.INDEPENDENT),
        (fmt.UPDATES, fmt.BLOCKED),  # analysis expected a gradient; none arrived
        (fmt.IGNORED, fmt.IGNORED),  # not in var_list: often not even computed
        (None, NO_GRADIENT),
    ],
)
def test_no_gradient_takes_the_static_state(static, expected):
    assert cell_state(grad(grad_vars=0.0), static) == expected
    assert cell_state(None, static) == expected


def test_nonfinite_wins_over_everything_numeric():
    assert cell_state(grad(nonfinite=3.0), fmt.UPDATES) == fmt.NONFINITE
    assert cell_state(grad(l2=math.nan), fmt.UPDATES) == fmt.NONFINITE
    assert cell_state(grad(l2=math.inf), None) == fmt.NONFINITE


def test_vanishing_threshold_is_inclusive():
    assert cell_state(grad(l2=VANISHING_L2), fmt.UPDATES) == fmt.VANISHING
    assert cell_state(grad(l2=0.0), fmt.UPDATES) == fmt.VANISHING
    assert cell_state(grad(l2=VANISHING_L2 * 10), fmt.UPDATES) == fmt.UPDATES


def test_var_list_excluded_scope_is_ignored():
    assert cell_state(grad(), fmt.IGNORED) == fmt.IGNORED
    assert cell_state(grad(), None) == fmt.UPDATES
    assert cell_state(grad(), fmt.UPDATES) == fmt.UPDATES


def test_scope_update_norm_never_decides_a_cell():
    # The flow-state rule takes no update norm: a scope moved only by another
    # loss's optimizer (or one the recorder never saw) is not "updates" for
    # this loss, and a scope this loss's optimizer writes is "updates" even
    # where the recorded total ||delta theta|| is 0.
    assert "update_norm" not in inspect.signature(cell_state).parameters


floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))


@given(
    grad_vars=floats,
    l2=floats,
    nonfinite=floats,
    static=st.sampled_from([None, *fmt.STATIC_FLOW_STATES]),
)
def test_every_input_maps_to_a_documented_state(grad_vars, l2, nonfinite, static):
    row = {"grad_vars": grad_vars, "l2": l2, "nonfinite": nonfinite}
    state = cell_state(row, static)
    assert state in CELL_STATES
    if not grad_vars or not math.isfinite(grad_vars):
        assert state in (fmt.BLOCKED, fmt.INDEPENDENT, fmt.IGNORED, NO_GRADIENT)
