"""Semantics of never/only/blocked over FlowGraphs and gradient tables (docs/RULES.md)."""

from __future__ import annotations

import json
import math

from tb_gradscope import format as fmt
from tb_gradscope import rules
from tests.support import rules_fixtures as rf


def _tables(records) -> dict[int, dict[str, fmt.Table]]:
    out: dict[int, dict[str, fmt.Table]] = {}
    for info, step, payload in records:
        if info.kind == fmt.Kind.GRAD_STATS:
            out.setdefault(step, {})[info.name] = fmt.decode_table(
                info, fmt.encode_table(info, payload)
            )
    return out


def _flowgraph(leaky: bool) -> fmt.FlowGraph:
    info, _, docs = rf.dqn_records(leaky)[0]
    return fmt.FlowGraph.from_json(docs[0])


def _grads(rows: dict[str, list[float]], loss: str = "td") -> dict[str, fmt.Table]:
    info = fmt.make_info(fmt.Kind.GRAD_STATS, loss, list(rows))
    return {loss: fmt.decode_table(info, fmt.encode_table(info, list(rows.values())))}


def test_violation_is_reported_once_on_the_outermost_scope():
    events = rules.check_stats(
        [rules.never("td", "target/*")], 10, _tables(rf.dqn_records(True))[10]
    )
    assert [(e.scope, e.evidence["l2"]) for e in events] == [("target", 0.5)]


def test_nan_gradient_reaches_and_zero_or_absent_gradient_does_not():
    rule = rules.never("td", "t*")
    rows = {
        "t_nan": [1.0, math.nan, math.nan, 3.0, 0.0],
        "t_zero": [1.0, 0.0, 0.0, 0.0, 1.0],
        "t_none": [0.0, 0.0, 0.0, 0.0, 0.0],
    }
    events = rules.check_stats([rule], 0, _grads(rows))
    assert [e.scope for e in events] == ["t_nan"]
    assert math.isnan(events[0].evidence["l2"]) and events[0].evidence["nonfinite"] == 3.0


def test_a_max_abs_the_run_did_not_record_is_left_out_of_the_evidence():
    # Recorder(grad_columns=...) may leave max_abs out: it then reads NaN, never evidence.
    def evidence(max_abs: float) -> dict:
        (event,) = rules.check_stats(
            [rules.never("td", "t")], 0, _grads({"t": [1.0, 0.5, max_abs, 0.0, math.nan]})
        )
        json.dumps(event.to_json(), allow_nan=False)
        return event.evidence

    assert evidence(0.25)["max_abs"] == 0.25
    assert {k: v for k, v in evidence(0.25).items() if k != "max_abs"} == evidence(math.nan)


def test_ignored_scope_keeps_never_but_breaks_blocked():
    graph = _flowgraph(False)
    graph.cells["td"]["target"] = fmt.IGNORED
    graph.cells["td"]["target/l1"] = fmt.IGNORED
    assert rules.check_flowgraph([rules.never("td", "target/*")], graph) == []
    (event,) = rules.check_flowgraph([rules.blocked("td", "target/*")], graph)
    assert (event.scope, event.evidence["state"]) == ("target", fmt.IGNORED)


def test_gradient_on_a_statically_ignored_scope_keeps_never_at_a_step():
    grads = _tables(rf.dqn_records(True))[0]
    graph = _flowgraph(True)
    assert rules.check_stats([rules.never("td", "target/*")], 0, grads, flowgraph=graph) != []
    for scope in ("target", "target/l1"):
        graph.cells["td"][scope] = fmt.IGNORED
    assert rules.check_stats([rules.never("td", "target/*")], 0, grads, flowgraph=graph) == []


def test_step_time_evidence_names_the_missing_cut_when_given_the_flowgraph():
    grads = _tables(rf.dqn_records(True))[0]
    (event,) = rules.check_stats(
        [rules.never("td", "target/l1")], 0, grads, flowgraph=_flowgraph(True)
    )
    assert event.evidence["missing_cut"] == ["target/l1", "loss:td"]
    assert "missing cut on target/l1 -> loss:td" in event.message


def test_unknown_loss_or_scope_is_a_violation_not_a_silent_pass():
    graph = _flowgraph(False)
    events = rules.check_flowgraph(
        [rules.never("tdd", "target"), rules.never("td", "taget/*")], graph
    )
    assert [e.evidence["unmatched"] for e in events] == ["loss", "scope"]
    assert "the run has losses ['td']" in events[0].message


def test_only_reports_the_scope_outside_the_list():
    graph = _flowgraph(True)
    (event,) = rules.check_flowgraph([rules.only("td", ["online/*"])], graph)
    assert event.scope == "target"
    assert rules.check_flowgraph([rules.only("td", ["online/*"])], _flowgraph(False)) == []


def test_events_survive_the_events_record_json_round_trip():
    (event,) = rules.check_flowgraph([rules.never("td", "target/*")], _flowgraph(True), step=7)
    info = fmt.make_info(fmt.Kind.EVENTS)
    (doc,) = fmt.decode_blobs(info, fmt.encode_blobs(info, [event.to_json()]))
    assert fmt.Event.from_json(doc) == event
