"""What a TF1 step is: StepClock's counting, recording and update windows."""

from __future__ import annotations

import pytest

from tb_gradscope.integrations.tf1._steps import Close, Pause, StepClock


def ALWAYS(loss):
    return True


def test_alternating_train_ops_record_both_losses_at_the_same_steps():
    clock = StepClock({"loss1": "train1", "loss2": "train2"}, every_n_steps=5)
    recorded = []
    for _ in range(10):
        for op in ("train1", "train2"):
            plan = clock.plan({op}, ALWAYS)
            recorded.extend((loss, step) for loss, step in plan.losses.items())
    assert recorded == [("loss1", 0), ("loss2", 0), ("loss1", 5), ("loss2", 5)]


def test_update_window_spans_every_train_op_of_the_step():
    clock = StepClock({"loss1": "train1", "loss2": "train2"}, every_n_steps=2)
    first = clock.plan({"train1"}, ALWAYS)
    assert (first.snapshot, first.open_step, first.close_after) == (True, 0, None)
    second = clock.plan({"train2"}, ALWAYS)
    assert (second.snapshot, second.open_step, second.close_after) == (
        False,
        None,
        Close(0, None, True),
    )
    assert clock.plan({"train1"}, ALWAYS).open_step is None  # step 1: not recorded
    assert not clock.has_open_window


def test_train_ops_in_blocks_pause_the_window_and_resume_it():
    clock = StepClock({"actor": "a", "critic": "c"}, every_n_steps=3, slots=1)
    plans = [clock.plan({op}, ALWAYS) for op in "aaaccc"]
    assert plans[0].open_step == 0 and plans[0].snapshot
    assert plans[1].pause == Pause(0, 0, first=True) and not plans[1].snapshot
    assert plans[2].pause is None and plans[2].close_after is None  # step 2: nothing running
    assert plans[3].snapshot and plans[3].open_step is None  # step 0 resumes
    assert plans[3].close_after == Close(0, 0, True)
    assert [dict(p.losses) for p in plans] == [{"actor": 0}, {}, {}, {"critic": 0}, {}, {}]
    assert not clock.has_open_window


def test_each_step_opens_one_window_even_when_its_ops_run_apart():
    clock = StepClock({"actor": "a", "critic": "c"}, every_n_steps=1, slots=2)
    plans = [clock.plan({op}, ALWAYS) for op in "aaaccc"]
    assert [p.open_step for p in plans] == [0, 1, 2, None, None, None]
    assert [p.pause for p in plans[:4]] == [None, Pause(0, 0, True), Pause(1, 1, True), None]
    # window 2 must pause with both slots taken: closed early, running
    assert plans[3].closes == (Close(2, None, True, early=True, unmeasured=frozenset("c")),)
    assert [p.close_after for p in plans[3:]] == [Close(0, 0, True), Close(1, 1, True), None]


def test_window_of_an_op_that_never_comes_back_closes_at_the_end():
    clock = StepClock({"loss1": "train1", "loss2": "train2"}, every_n_steps=1, slots=1)
    clock.plan({"train1"}, ALWAYS)
    again = clock.plan({"train1"}, ALWAYS)  # train2 never ran at step 0
    assert (again.pause, again.open_step) == (Pause(0, 0, True), 1)
    assert clock.close() == [Close(0, 0, False), Close(1, None, True)] and clock.close() == []


def test_one_call_with_both_train_ops_is_one_step():
    clock = StepClock({"loss1": "train1", "loss2": "train2"}, every_n_steps=3)
    plans = [clock.plan({"train1", "train2"}, ALWAYS) for _ in range(4)]
    assert [dict(p.losses) for p in plans] == [
        {"loss1": 0, "loss2": 0},
        {},
        {},
        {"loss1": 3, "loss2": 3},
    ]
    assert [(p.open_step, p.close_after and p.close_after.step) for p in plans] == [
        (0, 0),
        (None, None),
        (None, None),
        (3, 3),
    ]


def test_calls_without_a_named_train_op_are_not_steps():
    clock = StepClock({"td": "train"}, every_n_steps=2)
    assert clock.plan({"other_op"}, ALWAYS) is None
    assert clock.plan(set(), ALWAYS) is None
    assert dict(clock.plan({"train"}, ALWAYS).losses) == {"td": 0}


def test_global_step_offset_continues_numbering():
    clock = StepClock({"td": "train"}, every_n_steps=2)
    clock.set_offset(7)
    steps = [dict(clock.plan({"train"}, ALWAYS).losses) for _ in range(3)]
    assert steps == [{}, {"td": 8}, {}]


def test_loss_without_train_op_is_recorded_with_the_window():
    clock = StepClock({"td": "train", "probe": None}, every_n_steps=2)
    assert dict(clock.plan({"train"}, ALWAYS).losses) == {"td": 0, "probe": 0}
    assert dict(clock.plan({"train"}, ALWAYS).losses) == {}


def test_loss_whose_inputs_are_not_fed_is_skipped():
    clock = StepClock({"loss1": "train", "loss2": "train"}, every_n_steps=1)
    plan = clock.plan({"train"}, lambda loss: loss != "loss2")
    assert dict(plan.losses) == {"loss1": 0}


@pytest.mark.parametrize("bad", [0, -3, 2.5, "10"])
def test_every_n_steps_must_be_a_positive_int(bad):
    with pytest.raises(ValueError, match="every_n_steps must be a positive int"):
        StepClock({"td": "train"}, every_n_steps=bad)
