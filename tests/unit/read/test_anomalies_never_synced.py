"""never_synced weighs how far the online network moved before the first drift record.

A target copied from its online network and since moved only toward it (EMA,
hard copy) is never farther from online than the path online travelled since
the copy. So a target far from online at the first recorded step (drift above
0.5) is never synced only if it is also farther than online's path since step
0, estimated from the single optimizer steps the run recorded (UPDATE's
`update_norm`, DRIFT's `online_step`), each unrecorded step taken as the larger
recorded move around it. A correct copy whose online network jumped at its
first steps (a ResNet's first conv on random data) is no anomaly; a twin never
copied, whose online moved little, still is; a log that recorded no move of
online is judged by drift alone, as before. Hand-built records, no training
(the training reproduction is tests/unit/commands/test_doctor_never_synced.py).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.read import anomalies
from tb_gradscope.read import finding as F
from tb_gradscope.read.anomalies import derived_anomalies
from tb_gradscope.read.findings import diagnose
from tb_gradscope.read.online_path import online_moves, path_estimate
from tb_gradscope.read.reader import Record, RunListing, TableSeries
from tb_gradscope.read.runs import RunLogs, decode_run
from tb_gradscope.read.summary import run_anomalies
from tb_gradscope.read.tracks import check_drift
from tb_gradscope.read.violations import evaluate

PAIR = "target<-online"
ATTRS = {"target": "target", "online": "online", "tau": 0.01}
ONLINE_NORM = 10.0

# ----- the path online travelled ------------------------------------------------------------


def test_each_unrecorded_step_moves_as_far_as_the_larger_recorded_move_around_it():
    # steps 1..4 unrecorded, between a first step of 6 and a fifth of 0.1
    assert path_estimate(5, {0: 6.0, 5: 0.1}) == pytest.approx(6.0 + 4 * 6.0 + 0.1)
    # a warm-up: moves grow, the later one bounds the steps before it
    assert path_estimate(3, {0: 1.0, 3: 2.0}) == pytest.approx(1.0 + 2 * 2.0 + 2.0)


def test_steps_before_the_first_and_after_the_last_recorded_move_take_the_nearest():
    assert path_estimate(4, {2: 1.0}) == pytest.approx(5.0)  # steps 0..4, five moves of 1


def test_moves_after_the_step_judged_or_not_finite_do_not_count_and_none_is_no_path():
    assert path_estimate(1, {0: 1.0, 1: math.nan, 7: 100.0}) == pytest.approx(2.0)
    assert path_estimate(5, {}) == 0.0
    assert path_estimate(5, {9: 3.0, 2: math.inf}) == 0.0


def _update(scopes: dict[str, float]) -> fmt.Table:
    info = fmt.make_info(fmt.Kind.UPDATE_STATS, "", list(scopes))
    return fmt.Table(info, np.asarray([[norm, 1.0] for norm in scopes.values()]))


def test_online_moves_are_the_online_scopes_update_norm_up_to_the_step_judged():
    updates = {
        0: _update({"online": 6.0, "online/l1": 5.0, "head": 1.0}),
        5: _update({"online": 0.1, "online/l1": 0.1}),
        10: _update({"online": 0.2}),
    }
    assert online_moves(updates, "online", 5) == {0: 6.0, 5: 0.1}


def test_without_the_online_row_the_highest_scopes_under_it_are_pooled():
    updates = {
        0: _update(
            {
                "online/l1": 3.0,
                "online/l1/kernel": 2.0,
                "online/l2": 4.0,
                "online/l3": math.nan,
                "onlineish": 100.0,
            }
        )
    }
    assert online_moves(updates, "online", 0) == {0: pytest.approx(5.0)}


def test_no_update_tables_or_no_online_scope_in_them_or_a_hostile_name_give_no_moves():
    updates = {0: _update({"head": 1.0})}
    assert online_moves(None, "online", 5) == {} and online_moves(updates, "online", 5) == {}
    assert online_moves(updates, ["online"], 5) == {} and online_moves(updates, "", 5) == {}


# ----- never_synced ------------------------------------------------------------------------


def _drift(distance: float, online_step: float = math.nan) -> fmt.Table:
    """A DRIFT table of one target scope `distance` away from an online network of norm ONLINE_NORM,
    moving as an EMA at tau 0.01; `online_step`: online's last single step (NaN: not recorded)."""
    info = dataclasses.replace(
        fmt.make_info(fmt.Kind.DRIFT, PAIR, ["target"], ATTRS), columns=fmt.DRIFT_COLUMNS
    )
    gap = distance
    row = {
        "drift": distance / ONLINE_NORM,
        "distance": distance,
        "online_norm": ONLINE_NORM,
        "target_step": 0.01 * gap,
        "tau": 0.01,
        "online_step": online_step,
        "gap": gap,
        "tau_reverse": math.nan,
        "gap_reverse": math.nan,
        "optimizer_vars": 0.0,
        "target_moved": math.nan,
    }
    return fmt.Table(info, np.asarray([[row[c] for c in fmt.DRIFT_COLUMNS]]))


def _never_synced(
    distance: float, moves: dict[int, float] | None, online_step: float = 0.05, first: int = 5
):
    tables = [_drift(distance * 0.95**i, online_step) for i in range(3)]
    found = anomalies.find_anomalies(
        PAIR, ATTRS, [first, first + 5, first + 10], tables, moves=moves
    )
    return [e for e in found if e.name == anomalies.NEVER_SYNCED]


def test_a_copy_online_ran_away_from_at_its_first_step_is_not_never_synced():
    # drift 0.86 at step 5, online's first step 6.0 long: within online's path, a correct copy
    assert _never_synced(8.6, {0: 6.0}) == []


def test_a_target_farther_than_online_moved_is_never_synced_with_the_path_in_evidence():
    (event,) = _never_synced(8.6, {0: 0.06})
    assert (event.step, event.scope, event.pair) == (5, "target", PAIR)
    assert event.evidence["online_path"] == pytest.approx(0.06 * 5 + 0.05)
    assert event.evidence["online_moves_recorded"] == 2 and event.evidence[
        "distance"
    ] == pytest.approx(8.6)
    assert "online moved about 0.35 over steps 0..5 (2 recorded)" in event.message


def test_drift_below_the_threshold_is_never_never_synced_however_little_online_moved():
    assert _never_synced(4.0, {0: 0.0}, online_step=0.0) == []


def test_a_record_without_any_move_of_online_is_judged_by_drift_alone():
    # a DRIFT record without online_step (another writer, an older one) and no UPDATE tables
    (event,) = _never_synced(8.6, None, online_step=math.nan)
    assert (
        event.evidence["online_path"] == 0.0 and "no move of online was recorded" in event.message
    )


def test_online_step_of_the_first_drift_record_alone_counts_as_a_recorded_move():
    # no UPDATE tables; online's step into the first record, 2.0, stands for steps 0..5: path 12
    assert _never_synced(8.6, None, online_step=2.0) == []
    assert len(_never_synced(8.6, None, online_step=1.0)) == 1  # path 6 < 8.6


def test_moves_recorded_after_the_first_drift_record_do_not_excuse_it():
    assert len(_never_synced(8.6, {0: 0.06, 10: 50.0})) == 1


# ----- doctor, report and check read the same moves ------------------------------------------


def _logs(first_move: float) -> RunLogs:
    """A run whose online network moved `first_move` at step 0, its target 8.6 away at step 5."""
    drift = [(s, _drift(8.6 * 0.95**i, 0.05)) for i, s in enumerate((5, 10, 15))]
    updates = {s: _update({"online": first_move if s == 0 else 0.05}) for s in (0, 5, 10, 15)}
    return RunLogs("r", updates=updates, drift={PAIR: drift})


@pytest.mark.parametrize("first_move,found", [(6.0, False), (0.06, True)])
def test_doctor_report_and_check_agree_on_never_synced(first_move, found):
    logs = _logs(first_move)
    (pair,) = logs.pairs
    assert pair.online_moves == {0: first_move, 5: 0.05}  # up to the first drift record
    doctor = [f for f in diagnose(logs) if f.evidence.get("anomaly") == anomalies.NEVER_SYNCED]
    report = [e for e in run_anomalies(logs)[0] if e.name == anomalies.NEVER_SYNCED]
    rule = rules_lib.parse_rule("tracks(target, online, tau=0.01)")
    check = [
        e for e in evaluate(logs, [rule]) if e.evidence.get("anomaly") == anomalies.NEVER_SYNCED
    ]
    assert (bool(doctor), bool(report), bool(check)) == (found,) * 3
    if found:
        assert doctor[0].kind == F.PAIR_ANOMALY and doctor[0].scope == "target"
        assert (
            doctor[0].evidence["online_path"]
            == report[0].evidence["online_path"]
            == check[0].evidence["online_path"]
        )


def test_tracks_rules_read_the_moves_only_when_given_the_update_tables():
    logs = _logs(6.0)
    rule = rules_lib.parse_rule("tracks(target, online, tau=0.01)")
    assert check_drift([rule], logs.drift, 15, logs.updates) == []
    (event,) = check_drift(
        [rule], logs.drift, 15
    )  # the drift record alone: online_step 0.05 over steps 0..5
    assert event.evidence["anomaly"] == anomalies.NEVER_SYNCED


def test_the_tab_and_report_derive_anomalies_from_one_decoding_of_the_series():
    """The tab's events route lists what `report` lists: both read the
    `decode_run` of the run's table series, UPDATE tables included."""
    logs = _logs(6.0)
    series = []
    for kind, name, by_step in (
        (fmt.Kind.UPDATE_STATS, "", sorted(logs.updates.items())),
        (fmt.Kind.DRIFT, PAIR, logs.drift[PAIR]),
    ):
        info = by_step[0][1].info
        record = Record(fmt.tag_for(kind, name), info, (0,))
        series.append(
            TableSeries(
                record,
                np.asarray([s for s, _ in by_step]),
                np.zeros(len(by_step)),
                np.stack([t.values for _, t in by_step]).astype(np.float32),
            )
        )
    listing = RunListing("r", {s.record.tag: s.record for s in series})
    decoded = decode_run(listing, {s.record.tag: s for s in series}, {}, {})
    assert sorted(decoded.updates) == [0, 5, 10, 15]
    assert decoded.anomalies == run_anomalies(decoded) == ([], [])
    assert decoded.timeline == []
    (event,), _ = derived_anomalies("r", decoded.drift, [])
    assert (
        event.name == anomalies.NEVER_SYNCED
    )  # the drift series alone cannot see online's first step
