"""GradscopeCallback's lifecycle on brief SB3 DQN runs: a leak doctor names,
renamed losses, and an error anywhere (in train(), in a rollout, in the
recorder) that leaves torch and the algorithm as they were."""

from __future__ import annotations

import pytest

pytest.importorskip("stable_baselines3")

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from stable_baselines3 import DQN  # noqa: E402
from stable_baselines3.common.callbacks import (  # noqa: E402
    BaseCallback,
    CallbackList,
    CheckpointCallback,
)

from tb_gradscope import format as fmt  # noqa: E402
from tb_gradscope.read.logdir import load_logdir  # noqa: E402
from tb_gradscope.torch import GradscopeWarning, Recorder  # noqa: E402
from tb_gradscope.torch.sb3 import GradscopeCallback  # noqa: E402
from tests.support.torch_sb3 import doctor, make_dqn  # noqa: E402

pytestmark = pytest.mark.slow

ORIGINAL_BACKWARD = torch.autograd.backward
ORIGINAL_TENSOR_BACKWARD = torch.Tensor.backward


class LeakyDQN(DQN):
    """SB3's DQN.train with the TD target computed without `th.no_grad()` / `.detach()`."""

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        for _ in range(gradient_steps):
            data = self.replay_buffer.sample(batch_size, env=self._vec_normalize_env)
            next_q, _ = self.q_net_target(data.next_observations).max(dim=1)  # the leak
            target = data.rewards + (1 - data.dones) * self.gamma * next_q.reshape(-1, 1)
            current = torch.gather(self.q_net(data.observations), 1, data.actions.long())
            loss = F.smooth_l1_loss(current, target)
            self.policy.optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
            self.policy.optimizer.step()
        self._n_updates += gradient_steps


class FailingDQN(DQN):
    """A DQN whose third train() call raises after its backward."""

    calls = 0

    def train(self, gradient_steps: int, batch_size: int = 100) -> None:
        super().train(gradient_steps, batch_size)
        self.calls += 1
        if self.calls == 3:
            raise RuntimeError("replay buffer on fire")


class StopAt(BaseCallback):
    """Raises in the rollout (outside train()) at env step `at`."""

    def __init__(self, at: int):
        super().__init__()
        self.at = at

    def _on_step(self) -> bool:
        if self.num_timesteps == self.at:
            raise RuntimeError("environment on fire")
        return True


def _unpatched(model) -> bool:
    return (
        torch.autograd.backward is ORIGINAL_BACKWARD
        and torch.Tensor.backward is ORIGINAL_TENSOR_BACKWARD
        and "train" not in vars(model)
    )


def test_doctor_names_the_target_a_detach_free_dqn_reaches(tmp_path):
    torch.set_num_threads(1)
    model = make_dqn(LeakyDQN)
    callback = GradscopeCallback(tmp_path / "dqn_leaky")
    model.learn(600, callback=callback)
    (logs,) = load_logdir(str(tmp_path))
    graph = logs.flowgraphs[-1][1]
    assert graph.state("loss", "q_net_target") == fmt.IGNORED  # reached, in no optimizer
    assert graph.state("loss", "q_net") == fmt.UPDATES
    code, found = doctor(str(tmp_path))
    named = [(f["kind"], f["loss"], f["scope"], f["severity"]) for f in found]
    assert named == [("target_not_cut", "loss", "q_net_target", "hazard")]
    # SB3's DQN optimizer holds q_net only: the leak trains nothing yet, a
    # hazard; --strict fails CI on it.
    assert code == 0
    assert doctor(str(tmp_path), "--strict")[0] == 1


def test_losses_renames_sb3_loss_names(tmp_path):
    model = make_dqn()
    model.learn(200, callback=GradscopeCallback(tmp_path / "dqn", losses={"loss": "td"}))
    (logs,) = load_logdir(str(tmp_path))
    assert logs.flowgraphs[-1][1].state("td", "q_net_target") == fmt.BLOCKED
    assert {loss for step in logs.steps for loss in logs.grads[step]} == {"td"}


def test_an_error_in_train_leaves_torch_and_the_algorithm_as_they_were(tmp_path):
    model = make_dqn(FailingDQN, train_freq=1)
    callback = GradscopeCallback(tmp_path / "dqn", every_n_steps=1)
    with pytest.raises(RuntimeError, match="replay buffer on fire"):
        model.learn(200, callback=callback)
    assert _unpatched(model)
    with pytest.raises(RuntimeError, match="closed"):
        callback.recorder.watch()
    (logs,) = load_logdir(str(tmp_path))  # what it recorded is readable
    assert logs.steps == [0, 1, 2] and logs.flowgraphs


def test_an_error_in_a_rollout_leaves_backward_alone_and_the_next_learn_records(tmp_path):
    model = make_dqn(train_freq=1)
    first = GradscopeCallback(tmp_path / "first")
    with pytest.raises(RuntimeError, match="environment on fire"):
        model.learn(200, callback=CallbackList([first, StopAt(120)]))
    # Watched only inside train(): nothing is left patched by the rollout's error.
    assert torch.autograd.backward is ORIGINAL_BACKWARD
    assert torch.Tensor.backward is ORIGINAL_TENSOR_BACKWARD
    second = GradscopeCallback(tmp_path / "second")
    model.learn(100, callback=second, reset_num_timesteps=False)
    assert _unpatched(model)
    with pytest.raises(RuntimeError, match="closed"):
        first.recorder.watch()  # the second learn() ended the first's recording
    runs = {logs.run: logs for logs in load_logdir(str(tmp_path))}
    assert set(runs) == {"first", "second"} and runs["second"].steps[0] == 0


def test_a_recorder_that_cannot_watch_warns_once_and_training_goes_on(tmp_path):
    other = Recorder(tmp_path / "other", models={"net": torch.nn.Linear(2, 2)})
    model = make_dqn(train_freq=1)
    callback = GradscopeCallback(tmp_path / "dqn")
    with other.watch(), pytest.warns(GradscopeWarning, match="stopped recording") as warned:
        model.learn(150, callback=callback)
    other.close()
    assert len([w for w in warned if "GradscopeCallback" in str(w.message)]) == 1
    assert model._n_updates == 100 and _unpatched(model)


def test_one_callback_records_one_learn_call(tmp_path):
    model = make_dqn(train_freq=1)
    callback = GradscopeCallback(tmp_path / "dqn")
    model.learn(100, callback=callback)
    steps = callback.recorder.step_count
    with pytest.warns(GradscopeWarning, match="already recorded a learn"):
        model.learn(100, callback=callback, reset_num_timesteps=False)
    assert callback.recorder.step_count == steps and _unpatched(model)


def test_a_bad_rule_raises_as_the_recorder_does_and_leaves_nothing_patched(tmp_path):
    model = make_dqn(train_freq=1)
    callback = GradscopeCallback(tmp_path / "dqn", rules=["never(loss"])
    with pytest.raises(ValueError, match="never"):
        model.learn(100, callback=callback)
    assert _unpatched(model)


def test_checkpoints_saved_during_training_load_as_plain_algorithms(tmp_path):
    model = make_dqn(train_freq=1)
    saves = CheckpointCallback(save_freq=60, save_path=str(tmp_path / "ckpt"))
    model.learn(200, callback=CallbackList([GradscopeCallback(tmp_path / "logs" / "dqn"), saves]))
    (saved, *_) = sorted((tmp_path / "ckpt").glob("*.zip"))
    loaded = DQN.load(saved, device="cpu")
    assert "train" not in vars(loaded)
    loaded.set_env(model.get_env())
    loaded.learn(60)  # trains as DQN does
    assert loaded._n_updates > 0 and _unpatched(model)
