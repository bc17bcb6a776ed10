"""Stable-Baselines3's DQN, SAC, TD3 and PPO, trained briefly with
`GradscopeCallback` and nothing else changed: the flow states are what each
algorithm's train() does, its targets are paired at its own rate, and
`tb-gradscope doctor` finds nothing. Each algorithm trains once per session
(tiny nets, a few hundred environment steps); the tests read its run."""

from __future__ import annotations

import dataclasses
import pathlib
import weakref
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("stable_baselines3")

import torch  # noqa: E402
from stable_baselines3 import A2C, PPO, SAC, TD3  # noqa: E402

from tb_gradscope import format as fmt  # noqa: E402
from tb_gradscope.read.drift import pair_series, update_mode  # noqa: E402
from tb_gradscope.read.logdir import load_logdir  # noqa: E402
from tb_gradscope.read.runs import RunLogs  # noqa: E402
from tb_gradscope.torch.sb3 import GradscopeCallback  # noqa: E402
from tests.support.torch_sb3 import DQN_STEPS, doctor, make_dqn, tiny  # noqa: E402

pytestmark = pytest.mark.slow

UPD, IGN, BLK, IND = fmt.UPDATES, fmt.IGNORED, fmt.BLOCKED, fmt.INDEPENDENT


@dataclasses.dataclass
class Trained:
    model: Any
    callback: GradscopeCallback
    logdir: str
    logs: RunLogs
    doctor: tuple[int, list[dict]]
    seen: dict = dataclasses.field(default_factory=dict)

    def state(self, loss: str, scope: str) -> str:
        return self.logs.flowgraphs[-1][1].state(loss, scope)


def train(
    root: pathlib.Path,
    name: str,
    model: Any,
    steps: int,
    watch: Callable[[Any], dict] | None = None,
    **options: Any,
) -> Trained:
    torch.set_num_threads(1)
    seen = watch(model) if watch else {}
    callback = GradscopeCallback(root / name, **options)
    model.learn(steps, callback=callback)
    (logs,) = load_logdir(str(root))
    return Trained(model, callback, str(root), logs, doctor(str(root)), seen)


def count_critic_gradients(critic: torch.nn.Module, optimizers: dict) -> dict:
    """An oracle beside the recorder: at each optimizer step, how many backwards
    have written each critic parameter's `.grad` since it was last None (a
    fresh `.grad` tensor is a first write, the same tensor again an accumulation)."""
    last: dict[int, tuple[Any, int]] = {}  # id(param) -> (weakref to its grad, writes)
    seen: dict[str, set[int]] = {name: set() for name in optimizers}
    params = list(critic.parameters())

    def written(p: torch.Tensor) -> None:
        ref, writes = last.get(id(p), (None, 0))
        same = ref is not None and ref() is p.grad  # ids are reused; a weak reference is not
        last[id(p)] = (weakref.ref(p.grad), writes + 1 if same else 1)

    def at_step(name: str) -> Callable:
        def hook(optimizer: Any, *args: Any) -> None:
            for p in params:
                if p.grad is not None:
                    seen[name].add(last[id(p)][1])

        return hook

    for p in params:
        p.register_post_accumulate_grad_hook(written)
    for name, opt in optimizers.items():
        opt.register_step_pre_hook(at_step(name))
    return seen


def seen_mode(series: list) -> Any:
    """The update mode the read side sees in a pair's DRIFT records."""
    steps, tables = [s for s, _ in series], [t for _, t in series]
    return update_mode(pair_series(tables[-1].info.attrs, tables, steps)[2])


@pytest.fixture(scope="session")
def sb3_dqn(tmp_path_factory) -> Trained:
    return train(tmp_path_factory.mktemp("sb3_dqn"), "dqn", make_dqn(), DQN_STEPS)


@pytest.fixture(scope="session")
def sb3_sac(tmp_path_factory) -> Trained:
    model = SAC("MlpPolicy", "Pendulum-v1", learning_starts=50, **tiny())
    return train(
        tmp_path_factory.mktemp("sb3_sac"),
        "sac",
        model,
        250,
        watch=lambda m: count_critic_gradients(
            m.critic, {"critic": m.critic.optimizer, "actor": m.actor.optimizer}
        ),
    )


@pytest.fixture(scope="session")
def sb3_td3(tmp_path_factory) -> Trained:
    model = TD3("MlpPolicy", "Pendulum-v1", learning_starts=50, **tiny())
    return train(tmp_path_factory.mktemp("sb3_td3"), "td3", model, 250)


@pytest.fixture(scope="session")
def sb3_ppo(tmp_path_factory) -> Trained:
    # 2 rollouts of 64 steps x 2 epochs x 2 minibatches: 8 gradient steps.
    model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, batch_size=32, n_epochs=2, **tiny())
    return train(tmp_path_factory.mktemp("sb3_ppo"), "ppo", model, 128, every_n_steps=3)


# ----- DQN -------------------------------------------------------------------


def test_dqn_loss_updates_q_net_and_is_blocked_on_its_target(sb3_dqn):
    assert sb3_dqn.state("loss", "q_net") == UPD
    assert sb3_dqn.state("loss", "q_net_target") == BLK
    (edge,) = {(e.cause, e.op_type) for e in sb3_dqn.logs.flowgraphs[-1][1].blocked_edges}
    assert edge == (fmt.flowgraph.CAUSE_STOP_GRADIENT, "no_grad")


def test_dqn_one_recorder_step_is_one_gradient_step(sb3_dqn):
    rec, model = sb3_dqn.callback.recorder, sb3_dqn.model
    assert rec.step_count == model._n_updates - 1
    assert sb3_dqn.logs.steps == list(range(0, model._n_updates, 10))


def test_dqn_hard_copy_is_paired_in_gradient_steps(sb3_dqn):
    ((name, series),) = sb3_dqn.logs.drift.items()
    assert name == "q_net_target<-q_net"
    attrs = series[-1][1].info.attrs
    assert (attrs["target"], attrs["online"], attrs["tau"], attrs["every"]) == (
        "q_net_target",
        "q_net",
        1.0,
        25,
    )
    # The records alone show it: hard copies, 25 gradient steps apart.
    mode = seen_mode(series)
    assert (mode.kind, mode.every) == ("hard", 25) and mode.points >= 4


def test_dqn_callback_leaves_the_algorithm_and_torch_as_they_were(sb3_dqn):
    assert "train" not in vars(sb3_dqn.model)  # DQN.train again
    assert not hasattr(torch.autograd.backward, "__wrapped__")
    assert not hasattr(torch.Tensor.backward, "__wrapped__")
    assert sb3_dqn.callback.recorder.disabled is False


def test_dqn_training_with_the_callback_is_bitwise_training_without_it(sb3_dqn):
    torch.set_num_threads(1)
    plain = make_dqn()
    plain.learn(DQN_STEPS)
    watched = sb3_dqn.model.policy.state_dict()
    for key, value in plain.policy.state_dict().items():
        assert torch.equal(value, watched[key]), key


# ----- SAC -------------------------------------------------------------------


def test_sac_critic_loss_updates_the_critic_only(sb3_sac):
    assert sb3_sac.state("critic_loss", "critic") == UPD
    for scope in ("critic_target", "actor", "ent_coef"):  # no_grad target; detached alpha
        assert sb3_sac.state("critic_loss", scope) == BLK, scope


def test_sac_actor_loss_updates_the_actor_and_reaches_the_critic_unapplied(sb3_sac):
    assert sb3_sac.state("actor_loss", "actor") == UPD
    assert sb3_sac.state("actor_loss", "critic") == IGN
    assert sb3_sac.state("actor_loss", "ent_coef") == BLK
    assert sb3_sac.state("actor_loss", "critic_target") == IND
    # What SB3 does: at the actor's step the critic holds two backwards'
    # gradients (critic_loss, actor_loss), at the critic's step only one:
    # zero_grad() dropped the actor's before critic_loss.backward().
    assert sb3_sac.seen == {"actor": {2}, "critic": {1}}


def test_sac_ent_coef_loss_updates_the_entropy_coefficient(sb3_sac):
    assert sb3_sac.state("ent_coef_loss", "ent_coef") == UPD
    assert sb3_sac.state("ent_coef_loss", "actor") == BLK  # log_prob.detach()
    assert sb3_sac.state("ent_coef_loss", "critic") == IND


def test_sac_records_its_three_losses_in_one_step_per_gradient_step(sb3_sac):
    assert sb3_sac.callback.recorder.step_count == sb3_sac.model._n_updates - 1
    for step in sb3_sac.logs.steps:
        assert set(sb3_sac.logs.grads[step]) == {"ent_coef_loss", "critic_loss", "actor_loss"}


def test_sac_critic_target_follows_at_tau(sb3_sac):
    ((name, series),) = sb3_sac.logs.drift.items()
    assert name == "critic_target<-critic" and series[-1][1].info.attrs["tau"] == 0.005
    mode = seen_mode(series)
    assert mode.kind == "ema" and abs(mode.tau - 0.005) < 1e-4
    tau = [float(t.column("tau")[0]) for _, t in series if t.column("target_step")[0] > 0]
    assert tau and all(abs(t - 0.005) < 1e-4 for t in tau), tau


# ----- TD3 -------------------------------------------------------------------


def test_td3_flow_states(sb3_td3):
    expected = {
        ("critic_loss", "critic"): UPD,
        ("critic_loss", "critic_target"): BLK,
        ("critic_loss", "actor_target"): BLK,
        ("critic_loss", "actor"): IND,
        ("actor_loss", "actor"): UPD,
        ("actor_loss", "critic/qf0"): IGN,  # q1_forward: the first critic only
        ("actor_loss", "critic/qf1"): IND,
        ("actor_loss", "actor_target"): IND,
    }
    assert {cell: sb3_td3.state(*cell) for cell in expected} == expected


def test_td3_delayed_actor_is_recorded_at_its_own_steps(sb3_td3):
    # policy_delay 2: the actor trains at gradient steps s with (s + 1) % 2 == 0;
    # the default every_n_steps (11) records both kinds of step.
    assert sb3_td3.callback.every_n_steps == 11
    for step in sb3_td3.logs.steps:
        expected = {"critic_loss", "actor_loss"} if (step + 1) % 2 == 0 else {"critic_loss"}
        assert set(sb3_td3.logs.grads[step]) == expected, step
    assert any(len(sb3_td3.logs.grads[s]) == 2 for s in sb3_td3.logs.steps)


def test_td3_targets_follow_at_tau(sb3_td3):
    assert sorted(sb3_td3.logs.drift) == ["actor_target<-actor", "critic_target<-critic"]
    for series in sb3_td3.logs.drift.values():
        assert series[-1][1].info.attrs["tau"] == 0.005
        mode = seen_mode(series)
        assert mode.kind == "ema" and abs(mode.tau - 0.005) < 1e-4
        tau = [float(t.column("tau")[0]) for _, t in series if t.column("target_step")[0] > 0]
        assert tau and all(abs(t - 0.005) < 1e-4 for t in tau), tau


# ----- PPO -------------------------------------------------------------------


def test_ppo_combined_loss_updates_the_whole_policy(sb3_ppo):
    for scope in (
        "policy/mlp_extractor/policy_net",
        "policy/mlp_extractor/value_net",
        "policy/action_net",
        "policy/value_net",
    ):
        assert sb3_ppo.state("loss", scope) == UPD, scope
    assert sb3_ppo.callback.recorder.step_count == 7  # one step per minibatch
    assert sb3_ppo.logs.steps == [0, 3, 6] and not sb3_ppo.logs.drift


def test_a2c_one_loss_updates_the_whole_policy(tmp_path):
    # 8 rollouts of 8 steps: one gradient step each.
    model = A2C("MlpPolicy", "CartPole-v1", n_steps=8, **tiny())
    trained = train(tmp_path, "a2c", model, 64, every_n_steps=2)
    assert trained.state("loss", "policy/action_net") == UPD
    assert trained.state("loss", "policy/value_net") == UPD
    assert trained.callback.recorder.step_count == 7 and trained.doctor == (0, [])


# ----- all four --------------------------------------------------------------


@pytest.mark.parametrize("name", ["sb3_dqn", "sb3_sac", "sb3_td3", "sb3_ppo"])
def test_doctor_is_silent_on_each_algorithm(name, request):
    trained = request.getfixturevalue(name)
    assert trained.doctor == (0, [])
    assert trained.logs.flowgraphs[-1][1].warnings == []
    assert not [e for e in trained.logs.events if e.type in (fmt.VIOLATION, fmt.ANOMALY)]
