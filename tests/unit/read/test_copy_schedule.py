"""Target updates judged between records, whatever steps the records fall on.

The DRIFT rows here are computed with numpy from a simulated online network
(a random walk) and a target updated on a chosen schedule, with the columns'
definitions of `record/_drift.py`: values at step t are those after t optimizer
steps and the target update of step t. Records at 1, 11, 21, ... fall off the
copy period's phase (as the TF2 Recorder's did before its drift was labelled
with the step of its gradients), so a copy at step 50 is never seen in one
step, only in `target_moved` between the records at 41 and 51.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence

import numpy as np
import pytest

from tb_gradscope import format as fmt
from tb_gradscope.format.metadata import DRIFT_COLUMNS
from tb_gradscope.read import anomalies
from tb_gradscope.read.copy_schedule import Intervals
from tb_gradscope.read.drift import copies_fit, update_mode

Update = Callable[[int, np.ndarray, np.ndarray], np.ndarray]


def copy_every(period: int, until: int | None = None) -> Update:
    def update(step, target, online):
        due = step % period == 0 and (until is None or step <= until)
        return online.copy() if due else target

    return update


def ema_on(tau: float, odd: bool) -> Update:
    def update(step, target, online):
        return target + tau * (online - target) if step % 2 == int(odd) else target

    return update


def simulate(update: Update, steps: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Target and online values after each step 0..steps (row t)."""
    rng = np.random.default_rng(seed)
    online = np.empty((steps + 1, 32))
    target = np.empty_like(online)
    online[0] = rng.normal(size=32)
    target[0] = online[0]
    trend = rng.normal(size=32) * 0.01
    for t in range(1, steps + 1):
        online[t] = online[t - 1] + trend + rng.normal(size=32) * 0.01
        target[t] = update(t, target[t - 1], online[t])
    return target, online


def drift_record(
    target: np.ndarray, online: np.ndarray, steps: Sequence[int], **declared
) -> tuple[dict, list[fmt.Table]]:
    """The DRIFT tables of one scope at `steps`, and the record's attrs."""
    attrs = {"target": "target", "online": "online", **declared}
    info = dataclasses.replace(
        fmt.make_info(fmt.Kind.DRIFT, "target<-online", ["target"], attrs),
        columns=DRIFT_COLUMNS,
    )
    tables, previous = [], None
    for step in steps:
        t, o, tp, op = target[step], online[step], target[step - 1], online[step - 1]
        gap, gap_r = np.linalg.norm(o - tp), np.linalg.norm(t - op)
        row = {
            "drift": np.linalg.norm(t - o) / np.linalg.norm(o),
            "distance": np.linalg.norm(t - o),
            "online_norm": np.linalg.norm(o),
            "target_step": np.linalg.norm(t - tp),
            "tau": np.dot(t - tp, o - tp) / gap**2 if gap else math.nan,
            "online_step": np.linalg.norm(o - op),
            "gap": gap,
            "tau_reverse": np.dot(o - op, t - op) / gap_r**2 if gap_r else math.nan,
            "gap_reverse": gap_r,
            "optimizer_vars": 0.0,
            "target_moved": math.nan if previous is None else np.linalg.norm(t - previous),
        }
        previous = t
        values = np.array([[row[c] for c in DRIFT_COLUMNS]], dtype=np.float32)
        tables.append(fmt.Table(info, values))
    return attrs, tables


README_STEPS = list(range(1, 302, 10))  # records one step past the copies' phase


def _judge(update: Update, steps: Sequence[int], **declared):
    target, online = simulate(update, max(steps))
    attrs, tables = drift_record(target, online, steps, **declared)
    _, _, series = anomalies.pair_series(attrs, tables, steps)
    events = anomalies.find_anomalies("target<-online", attrs, steps, tables)
    return update_mode(series), sorted({e.name for e in events}), events


def test_copies_never_seen_in_one_step_are_hard_at_their_own_period():
    mode, names, _ = _judge(copy_every(50), README_STEPS, every=50)
    assert mode.label == "hard(50)"
    assert names == []


def test_copies_every_15_recorded_every_10_are_hard_15_not_the_records_gcd():
    mode, names, _ = _judge(copy_every(15), README_STEPS, every=15)
    assert mode.label == "hard(15)"
    assert names == []


@pytest.mark.parametrize("declared", [20, 25, 100])
def test_a_declared_period_the_moves_do_not_fit_is_every_mismatch(declared):
    mode, names, events = _judge(copy_every(50), README_STEPS, every=declared)
    assert mode.label == "hard(50)"
    assert names == [anomalies.EVERY_MISMATCH]
    assert events[0].evidence["declared_every"] == declared
    assert f"fit no copy every {declared} steps" in events[0].message


def test_declared_tau_with_copies_between_records_is_tau_mismatch():
    mode, names, events = _judge(copy_every(50), README_STEPS, tau=0.01)
    assert mode.kind == "hard"
    assert names == [anomalies.TAU_MISMATCH]
    assert events[0].evidence["effective_tau"] == 1.0


def test_ema_on_odd_steps_recorded_on_even_steps_is_ema_unknown_tau_and_no_alarm():
    """TD3's delayed targets: the update never runs in a recorded step."""
    steps = list(range(2, 303, 10))
    mode, names, _ = _judge(ema_on(0.005, odd=True), steps, tau=0.005)
    assert (mode.kind, mode.label) == ("ema", "ema(?)")
    assert names == []


def test_ema_on_even_steps_recorded_on_even_steps_gives_its_tau():
    steps = list(range(2, 303, 10))
    mode, _, _ = _judge(ema_on(0.005, odd=False), steps, tau=0.005)
    assert mode.kind == "ema" and mode.tau == pytest.approx(0.005, rel=1e-3)


def test_copies_that_stop_are_hard_then_frozen():
    mode, names, events = _judge(copy_every(50, until=100), README_STEPS, every=50)
    assert mode.label == "hard(50)"
    assert names == [anomalies.TARGET_FROZEN]
    assert events[0].evidence["first_step"] == 111


def test_records_without_target_moved_keep_the_records_own_period():
    """Older logs: copies every 15 recorded at multiples of 10 are seen at
    multiples of 30, which fits a declared 15 (lcm)."""
    target, online = simulate(copy_every(15), 300)
    steps = list(range(10, 301, 10))
    attrs, tables = drift_record(target, online, steps, every=15)
    for table in tables:
        table.values[:, DRIFT_COLUMNS.index("target_moved")] = np.nan
    _, _, series = anomalies.pair_series(attrs, tables, steps)
    assert update_mode(series).label == "hard(30)"
    assert copies_fit(series, 15) and not copies_fit(series, 20)


def _intervals(bounds: Sequence[tuple[int, int, bool]]) -> Intervals:
    start, end, moved = zip(*bounds)
    return Intervals(np.array(start), np.array(end), np.array(moved))


def test_fits_tests_every_phase_of_a_period():
    # Copies every 15 seen in records every 10 from step 1.
    records = list(range(1, 302, 10))
    copies = set(range(15, 302, 15))
    seen = _intervals(
        [(a, b, any(a < c <= b for c in copies)) for a, b in zip(records, records[1:])]
    )
    assert [seen.fits(p) for p in (10, 14, 15, 16, 30)] == [False, False, True, False, False]
    assert seen.period() == 15


def test_one_move_gives_no_period_and_an_interval_longer_than_the_period_must_move():
    one = _intervals([(0, 10, False), (10, 20, True), (20, 30, False)])
    assert one.period() is None
    assert one.fits(25) and not one.fits(5)
