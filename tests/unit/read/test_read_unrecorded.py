"""Readers of grad_stats when a run did not record `max_abs` / `zero_frac`.

`Recorder(grad_columns=...)` may leave those two columns out; they then read
NaN, which they never are when recorded. A NaN there is "not recorded": never
a number and never evidence. Here: whether a scope holds a single number
(`RunLogs.is_scalar`), which the doctor's value_not_cut detector asks.
"""

from __future__ import annotations

import math

from tb_gradscope import format as fmt
from tb_gradscope.format.flowgraph import NODE_LOSS, NODE_SCOPE
from tb_gradscope.read import finding as F
from tb_gradscope.read.findings import diagnose
from tb_gradscope.read.runs import RunLogs
from tests.support.run_logs import run_of_rows

NAN = math.nan


def _row(l2: float, max_abs: float = NAN, zero_frac: float = NAN, grad_vars: float = 1.0) -> dict:
    return {
        "grad_vars": grad_vars,
        "l2": l2,
        "max_abs": max_abs,
        "nonfinite": 0.0,
        "zero_frac": zero_frac,
    }


def _scope_records(*rows: dict) -> RunLogs:
    """Loss `a` gives scope `s` one row per step."""
    return run_of_rows([], {step: {"a": {"s": row}} for step, row in enumerate(rows)})


# ----- is_scalar ------------------------------------------------------------------------


def test_a_one_variable_scope_without_max_abs_is_not_known_to_be_a_single_number():
    assert _scope_records(_row(0.3), _row(0.5)).is_scalar("s") is None


def test_rows_without_max_abs_are_skipped_and_the_rows_that_tell_decide():
    assert _scope_records(_row(0.3), _row(0.5, max_abs=0.5), _row(0.7)).is_scalar("s") is True
    assert _scope_records(_row(0.3), _row(0.5, max_abs=0.25), _row(0.7)).is_scalar("s") is False


def test_several_variables_or_a_partial_zero_fraction_tell_without_max_abs():
    assert _scope_records(_row(0.3), _row(0.5, grad_vars=2.0)).is_scalar("s") is False
    assert _scope_records(_row(0.3), _row(0.5, zero_frac=0.5)).is_scalar("s") is False
    # One element is zero or not: a zero fraction of 0 or 1 tells nothing.
    assert _scope_records(_row(0.3, zero_frac=0.0), _row(0.0, zero_frac=1.0)).is_scalar("s") is None


def test_a_scope_that_received_no_gradient_is_not_a_single_number_as_before():
    assert _scope_records(_row(0.0, grad_vars=0.0)).is_scalar("s") is False
    assert _scope_records(_row(0.3, max_abs=0.3)).is_scalar("s") is True


# ----- the doctor -----------------------------------------------------------------------


def _temperature_run(temp_row: dict) -> RunLogs:
    """A SAC-like step: `actor` updates `pi` and reads the temperature `temp`
    from the side (an edge temp -> loss:actor); `alpha` alone trains `temp`;
    `actor` reaches `temp` but its optimizer does not write it."""
    nodes = [
        fmt.GraphNode("pi", NODE_SCOPE, "pi"),
        fmt.GraphNode("temp", NODE_SCOPE, "temp"),
        fmt.GraphNode("loss:actor", NODE_LOSS, "actor"),
        fmt.GraphNode("loss:alpha", NODE_LOSS, "alpha"),
    ]
    edges = [
        fmt.GraphEdge("pi", "loss:actor", 1),
        fmt.GraphEdge("temp", "loss:actor", 1),
        fmt.GraphEdge("temp", "loss:alpha", 1),
    ]
    graph = fmt.FlowGraph(
        losses=[fmt.LossInfo("actor", optimizer="opt0"), fmt.LossInfo("alpha", optimizer="opt1")],
        scopes=["pi", "temp"],
        cells={
            "actor": {"pi": fmt.UPDATES, "temp": fmt.IGNORED},
            "alpha": {"pi": fmt.INDEPENDENT, "temp": fmt.UPDATES},
        },
        nodes=nodes,
        edges=edges,
        applied=["pi", "temp"],
    )
    pi = _row(1.0, max_abs=0.5, zero_frac=0.0, grad_vars=2.0)
    grads = {
        step: {"actor": {"pi": pi, "temp": temp_row}, "alpha": {"temp": _row(0.2, 0.2, 0.0)}}
        for step in range(4)
    }
    return run_of_rows([(0, graph)], grads)


def test_doctor_finds_no_value_leak_on_a_scope_whose_size_was_not_recorded():
    # Recorded and a vector (l2 != max_abs): the detector fires, so it is live here.
    (leak,) = diagnose(_temperature_run(_row(0.3, max_abs=0.1, zero_frac=0.0)))
    assert (leak.kind, leak.loss, leak.scope) == (F.VALUE_NOT_CUT, "actor", "temp")
    # Recorded and a single number: a coefficient, no finding.
    assert diagnose(_temperature_run(_row(0.3, max_abs=0.3, zero_frac=0.0))) == []
    # Not recorded: nobody can tell it from a coefficient, so doctor says nothing.
    assert diagnose(_temperature_run(_row(0.3))) == []
