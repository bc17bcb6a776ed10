"""Zero-code capture: inside `rec.watch()` a plain loop's `loss.backward()` calls
are recorded as `rec.backward` records them, losses named by their call site,
one step per training iteration (DQN, SAC's three optimizers, TD3's delayed
actor, gradient accumulation), training bitwise unchanged."""

from __future__ import annotations

import threading
import warnings

import numpy as np
import pytest
import torch

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.rules import FlowRuleViolation
from tb_gradscope.torch import GradscopeWarning, Recorder, _call_site
from tb_gradscope.torch import _reach as reach_lib
from tb_gradscope.torch import _stats as stats
from tb_gradscope.torch import _torch_private as private
from tb_gradscope.torch._capture import Capture
from tb_gradscope.torch._recording import TorchRecording
from tests.support import torch_loops


@pytest.fixture
def deterministic():
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(before)


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def _run(logdir):
    (run,) = load_logdir(str(logdir))
    return run


@pytest.fixture(scope="module")
def sac_runs(tmp_path_factory):
    """SAC watched (no optimizer passed) and with rec.step() + rec.backward."""
    watched, block = tmp_path_factory.mktemp("sac_watch"), tmp_path_factory.mktemp("sac_block")
    params = {
        "plain": torch_loops.sac(None),
        "watch": torch_loops.sac(watched, mode="watch"),
        "block": torch_loops.sac(block, mode="block"),
    }
    return params, _run(watched), _run(block)


# ----- the same records as rec.backward ------------------------------------


def test_a_watched_dqn_records_the_tables_rec_backward_records(tmp_path):
    torch_loops.dqn(tmp_path / "backward")
    torch_loops.dqn(tmp_path / "watched", watched=True)
    explicit, watched = _run(tmp_path / "backward"), _run(tmp_path / "watched")
    assert watched.grad_steps == explicit.grad_steps == [0, 5, 10, 15, 20]
    for step in explicit.grad_steps:
        assert list(watched.grads[step]) == ["td"]  # "loss" at its call site, renamed
        np.testing.assert_array_equal(
            watched.grads[step]["td"].values, explicit.grads[step]["td"].values
        )
    for step in explicit.grad_steps:  # the step's update and the pair's drift too
        np.testing.assert_array_equal(watched.updates[step].values, explicit.updates[step].values)
    assert sorted(watched.drift) == sorted(explicit.drift) == ["target<-online"]
    assert len(watched.drift["target<-online"]) == len(explicit.drift["target<-online"]) > 1
    for (s1, a), (s2, b) in zip(watched.drift["target<-online"], explicit.drift["target<-online"]):
        assert s1 == s2
        np.testing.assert_array_equal(a.values, b.values)
    assert watched.flowgraph.cells == explicit.flowgraph.cells
    assert watched.flowgraph.cells["td"]["target"] == fmt.BLOCKED
    assert {loss.optimizer for loss in watched.flowgraph.losses} == {"opt0"}  # found


def test_a_watched_loop_trains_bitwise_as_the_unwatched(tmp_path, deterministic, sac_runs):
    assert _same(torch_loops.dqn(None), torch_loops.dqn(tmp_path / "dqn", watched=True))
    params, _, _ = sac_runs
    assert _same(params["plain"], params["watch"])
    assert _same(params["plain"], params["block"])
    td3_plain, _ = torch_loops.td3(None)
    td3_watched, _ = torch_loops.td3(tmp_path / "td3")
    assert _same(td3_plain, td3_watched)


# ----- one step per training iteration ---------------------------------------


def test_sac_gets_one_step_per_iteration_with_a_row_per_loss(sac_runs):
    _, watched, block = sac_runs
    assert watched.grad_steps == block.grad_steps == [0, 4, 8]  # 9 iterations, every 4
    for step in watched.grad_steps:
        assert set(watched.grads[step]) == {"ent_coef_loss", "critic_loss", "actor_loss"}
        for loss in watched.grads[step]:
            np.testing.assert_array_equal(
                watched.grads[step][loss].values, block.grads[step][loss].values
            )


def test_sac_flow_states_and_optimizers_are_found_without_being_passed(sac_runs):
    _, watched, block = sac_runs
    cells = watched.flowgraph.cells
    assert cells == block.flowgraph.cells
    assert cells["ent_coef_loss"]["ent"] == fmt.UPDATES
    assert cells["ent_coef_loss"]["actor"] == fmt.BLOCKED  # (log_prob + target).detach()
    assert cells["critic_loss"]["critic"] == fmt.UPDATES
    assert cells["critic_loss"]["critic_target"] == fmt.BLOCKED  # no_grad target
    assert cells["critic_loss"]["actor"] == fmt.BLOCKED
    assert cells["actor_loss"]["actor"] == fmt.UPDATES
    assert cells["actor_loss"]["critic"] == fmt.IGNORED  # the critic's optimizer stepped before
    # Adopted in the order they first stepped, as if passed in that order.
    assert {loss.name: loss.optimizer for loss in watched.flowgraph.losses} == {
        "ent_coef_loss": "opt0",
        "critic_loss": "opt1",
        "actor_loss": "opt2",
    }
    assert watched.pairs and block.pairs


def test_td3_delayed_actor_is_one_step_per_iteration(tmp_path):
    _, rec = torch_loops.td3(tmp_path, steps=6)
    run = _run(tmp_path)
    assert run.grad_steps == list(range(6))  # critic, [actor], critic, ... : 6 steps
    assert [sorted(run.grads[s]) for s in run.grad_steps] == [
        ["actor_loss", "critic_loss"],
        ["critic_loss"],
    ] * 3
    assert rec._watch.backwards == 9


def test_gradient_accumulation_stays_one_step(tmp_path):
    _, rec = torch_loops.accumulated(tmp_path, steps=4, micro=3)
    run = _run(tmp_path)
    assert rec._watch.backwards == 12
    assert run.grad_steps == [0, 1, 2, 3]
    assert [list(run.grads[s]) for s in run.grad_steps] == [["micro_loss"]] * 4


def test_a_user_step_block_overrides_the_watch_boundary(tmp_path):
    net = torch_loops.mlp(2, 1)
    opt = torch.optim.SGD(net.parameters(), 0.1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net})
    with rec.watch():
        for _ in range(3):
            with rec.step():
                for _ in range(2):  # td, opt.step, td, opt.step: one step in a block
                    td = net(torch.randn(4, 2)).pow(2).mean()
                    opt.zero_grad()
                    td.backward()
                    opt.step()
    rec.close()
    assert _run(tmp_path).grad_steps == [0, 1, 2]


# ----- observation only --------------------------------------------------------


def test_an_unrecorded_step_runs_no_recorder_work_beyond_the_counter(tmp_path, monkeypatch):
    steps_with_work: list[tuple[str, int]] = []
    holder: list[Recorder] = []

    def spy(owner, name):
        original = getattr(owner, name)

        def wrapped(*args, **kwargs):
            steps_with_work.append((name, holder[0].step_count))
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, wrapped)

    for owner, name in [
        (Recorder, "observe_backward"),
        (Recorder, "backward_observed"),
        (TorchRecording, "before_backward"),
        (TorchRecording, "after_backward"),
        (TorchRecording, "before_optimizer_step"),
        (reach_lib, "reached"),
        (private, "foreach_copy"),
        (stats, "GradColumns"),
    ]:
        spy(owner, name)
    make = Recorder.__init__

    def keep(self, *args, **kwargs):
        holder.append(self)
        make(self, *args, **kwargs)

    monkeypatch.setattr(Recorder, "__init__", keep)
    torch_loops.dqn(tmp_path, steps=21, watched=True)  # every_n_steps=5
    rec = holder[0]
    assert rec._watch.backwards == 21 and rec.step_count == 20
    assert {step for _, step in steps_with_work} == {0, 5, 10, 15, 20}
    assert {name for name, _ in steps_with_work} >= {"observe_backward", "reached", "foreach_copy"}


def test_an_error_inside_the_recorder_warns_once_and_training_goes_on_bitwise(
    tmp_path, monkeypatch
):
    def broken(*args, **kwargs):
        raise RuntimeError("injected")

    original = torch.autograd.backward
    without = torch_loops.dqn(None, steps=12)
    monkeypatch.setattr(stats, "GradColumns", broken)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        watched = torch_loops.dqn(tmp_path, steps=12, watched=True)
    said = [w for w in seen if issubclass(w.category, GradscopeWarning)]
    assert len(said) == 1
    assert "stopped recording after an error (RuntimeError: injected)" in str(said[0].message)
    assert _same(without, watched)
    assert torch.autograd.backward is original


def test_stepping_aside_while_watching_gives_torch_its_backward_back(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("no name")

    original = torch.autograd.backward
    net = torch_loops.mlp(2, 1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net})
    rec.watch()
    monkeypatch.setattr(_call_site, "loss_names", broken)
    loss = net(torch.ones(1, 2)).sum()
    with pytest.warns(GradscopeWarning, match="RuntimeError: no name"):
        loss.backward()
    assert net[0].weight.grad is not None  # the user's backward ran
    assert rec.disabled and torch.autograd.backward is original  # before close
    rec.close()


def test_a_violation_raised_while_watching_comes_after_the_users_backward(tmp_path):
    torch.manual_seed(0)
    online, target = torch_loops.mlp(2, 1), torch_loops.mlp(2, 1)
    rec = Recorder(
        tmp_path,
        every_n_steps=1,
        models={"online": online, "target": target},
        rules=["blocked(td, target/*)"],
        on_violation="raise",
    )
    x = torch.ones(3, 2)
    opt = torch.optim.SGD(online.parameters(), 0.1)
    with rec.watch():
        td = (online(x) - target(x)).pow(2).mean()  # the target is not detached: a leak
        td.backward()
        opt.step()
        expected = torch.autograd.grad((online(x) - target(x)).pow(2).mean(), [online[0].weight])
        online.zero_grad()
        td = (online(x) - target(x)).pow(2).mean()
        with pytest.raises(FlowRuleViolation, match="target"):
            td.backward()  # step 0 ends here: its violation is raised
        assert torch.equal(online[0].weight.grad, expected[0])  # yet the backward ran
    assert not rec.disabled
    rec.close()


def test_a_backward_torch_rejects_raises_torchs_error_and_recording_goes_on(tmp_path):
    net = torch_loops.mlp(2, 1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net})
    with rec.watch():
        with pytest.raises(TypeError):
            net(torch.ones(1, 2)).sum().backward(None, None, False, None, "extra")
        with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar"):
            net(torch.ones(3, 2)).backward()  # not a scalar: torch's own error
        td = net(torch.ones(1, 2)).sum()
        td.backward()
    rec.close()
    assert not rec.disabled
    assert list(_run(tmp_path).grads[0]) == ["td"]


def test_a_recorder_backward_while_watching_is_not_observed_twice(tmp_path):
    net = torch_loops.mlp(2, 1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net})
    with rec.watch():
        rec.backward({"td": net(torch.ones(1, 2)).sum()})
    rec.close()
    assert rec._watch.backwards == 0
    assert list(_run(tmp_path).grads[0]) == ["td"]


def test_backwards_on_other_threads_pass_through(tmp_path):
    net, other = torch_loops.mlp(2, 1), torch_loops.mlp(2, 1)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net})
    with rec.watch():
        worker = threading.Thread(target=lambda: other(torch.ones(1, 2)).sum().backward())
        worker.start()
        worker.join()
    rec.close()
    assert other[0].weight.grad is not None
    assert rec._watch.backwards == 0 and rec.step_count == 0


# ----- watching on and off ------------------------------------------------------


def test_unwatch_restores_torch_autograd_backward_exactly(tmp_path):
    original, tensor_backward = torch.autograd.backward, torch.Tensor.backward
    net = torch_loops.mlp(2, 1)
    rec = Recorder(tmp_path, models={"net": net})
    with rec.watch():
        assert torch.autograd.backward is not original
        assert torch.Tensor.backward is not tensor_backward
    assert torch.autograd.backward is original and torch.Tensor.backward is tensor_backward
    rec.watch()
    rec.close()  # close unwatches
    assert torch.autograd.backward is original and torch.Tensor.backward is tensor_backward


def test_the_step_0_capture_goes_off_when_watched_step_0_ends(tmp_path, monkeypatch):
    """The capture dispatches Tensor.backward with itself off its stack: watch
    mode must turn it off before that, or it would observe every later op."""
    observed = []
    original = Capture.__torch_function__

    def counting(self, *args, **kwargs):
        observed.append(1)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Capture, "__torch_function__", counting)
    net = torch_loops.mlp(2, 1)
    opt = torch.optim.SGD(net.parameters(), 0.1)
    rec = Recorder(tmp_path, every_n_steps=100, models={"net": net})
    with rec.watch():
        for step in range(4):
            if step == 2:
                observed.clear()  # step 0 ended at step 1's backward
            td = net(torch.ones(3, 2)).pow(2).mean()
            opt.zero_grad()
            td.backward()
            opt.step()
    rec.close()
    assert rec.step_count == 3 and observed == []


def test_one_watch_at_a_time(tmp_path):
    original = torch.autograd.backward
    first = Recorder(tmp_path / "a", models={"net": torch_loops.mlp(2, 1)})
    second = Recorder(tmp_path / "b", models={"net": torch_loops.mlp(2, 1)})
    with first.watch():
        with pytest.raises(RuntimeError, match="already watching; rec.watch.. does not nest"):
            first.watch()
        with pytest.raises(RuntimeError, match=f"Recorder '{first.logdir}' is already watching"):
            second.watch()
    first.close()
    with pytest.raises(RuntimeError, match="is closed"):
        first.watch()
    second.close()
    assert torch.autograd.backward is original


def test_loss_renames_are_checked(tmp_path):
    with pytest.raises(ValueError, match="loss name 'a/b'"):
        Recorder(tmp_path, models={"net": torch_loops.mlp(2, 1)}, losses={"x": "a/b"})


def test_a_loss_first_seen_later_is_analysed_with_its_forward_captured(tmp_path):
    """Watch mode learns a step ended only at the next step's first backward,
    after that step's forward: the capture a waiting loss set needs is handed
    over from step to step, not restarted late."""
    torch.manual_seed(0)
    net, other = torch_loops.mlp(2, 1), torch_loops.mlp(2, 1)
    opt = torch.optim.SGD(net.parameters(), 0.01)
    rec = Recorder(tmp_path, every_n_steps=1, models={"net": net, "other": other})
    with rec.watch():
        for step in range(10):
            x = torch.randn(4, 2)
            if step >= 3:  # its forward comes before the step's first backward
                aux = (net(x) * other(x).detach()).mean()
            td = net(x).pow(2).mean()
            opt.zero_grad()
            td.backward()
            if step >= 3:
                aux.backward()
            opt.step()
    rec.close()
    cells = _run(tmp_path).flowgraph.cells
    assert cells["aux"]["other"] == fmt.BLOCKED  # the .detach(), seen only by the capture
    assert cells["td"]["other"] == fmt.INDEPENDENT
