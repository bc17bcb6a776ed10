"""What a TF1 step is: StepClock's counting, recording and update windows."""

from __future__ import annotations

import pytest

from tb_gradscope.integrations.tf1.steps import StepClock

ALWAYS = lambda loss: True  # noqa: E731


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
    assert (first.close_before, first.open_step, first.close_after) == (None, 0, None)
    second = clock.plan({"train2"}, ALWAYS)
    assert (second.close_before, second.open_step, second.close_after) == (None, None, 0)
    assert clock.plan({"train1"}, ALWAYS).open_step is None  # step 1: not recorded
    assert clock.open_window is None


def test_window_closes_before_a_train_op_runs_twice():
    clock = StepClock({"loss1": "train1", "loss2": "train2"}, every_n_steps=1)
    clock.plan({"train1"}, ALWAYS)
    again = clock.plan({"train1"}, ALWAYS)  # train2 never ran at step 0
    assert (again.close_before, again.open_step) == (0, 1)
    assert clock.close() == 1 and clock.close() is None


def test_one_call_with_both_train_ops_is_one_step():
    clock = StepClock({"loss1": "train1", "loss2": "train2"}, every_n_steps=3)
    plans = [clock.plan({"train1", "train2"}, ALWAYS) for _ in range(4)]
    assert [dict(p.losses) for p in plans] == [
        {"loss1": 0, "loss2": 0}, {}, {}, {"loss1": 3, "loss2": 3}
    ]
    assert [(p.open_step, p.close_after) for p in plans] == [
        (0, 0), (None, None), (None, None), (3, 3)
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
