"""The SB3 callback reads each algorithm's structure as SB3 builds it: its
models become scopes, its optimizers are the ones it steps, and each target
is paired with its online network at the rate the algorithm applies it.
(No training here: the algorithms are only built.)"""

from __future__ import annotations

import pytest

pytest.importorskip("stable_baselines3")

import torch  # noqa: E402
from stable_baselines3 import DQN, PPO, SAC, TD3  # noqa: E402
from stable_baselines3.common.env_util import make_vec_env  # noqa: E402

from tb_gradscope.torch import Recorder  # noqa: E402
from tb_gradscope.torch import _sb3_structure as S  # noqa: E402
from tb_gradscope.torch.sb3 import GradscopeCallback, _default_every  # noqa: E402


def _tiny() -> dict:
    """Tiny nets; a fresh dict each time (SAC writes into policy_kwargs)."""
    return {"policy_kwargs": {"net_arch": [8]}, "device": "cpu", "seed": 0}


def _scopes(structure, tmp_path) -> tuple[str, ...]:
    rec = Recorder(
        tmp_path / "run",
        models=structure.models,
        optimizers=structure.optimizers,
        pairs=structure.pairs,
    )
    rec.close()
    return rec.layout.scopes


def test_dqn_scopes_are_q_net_and_q_net_target_with_the_policy_optimizer(tmp_path):
    model = DQN("MlpPolicy", "CartPole-v1", **_tiny())
    s = S.discover(model)
    assert list(s.models) == ["q_net", "q_net_target", "policy"]
    assert s.models["q_net"] is model.q_net and s.models["q_net_target"] is model.q_net_target
    assert s.optimizers == [model.policy.optimizer]
    scopes = _scopes(s, tmp_path)
    assert {"q_net/q_net/0", "q_net/q_net/2", "q_net_target/q_net/0"} <= set(scopes)
    assert not [sc for sc in scopes if sc.startswith("policy")]  # nothing left over


def test_dqn_hard_copy_is_declared_in_gradient_steps():
    # Defaults: a copy every 10000 env steps, 1 gradient step per 4 env steps.
    (pair,) = S.discover(DQN("MlpPolicy", "CartPole-v1", **_tiny())).pairs
    assert (pair.target.__class__.__name__, pair.tau, pair.every) == ("QNetwork", 1.0, 2500)
    quick = DQN("MlpPolicy", "CartPole-v1", target_update_interval=40, train_freq=1, **_tiny())
    assert S.discover(quick).pairs[0].every == 40
    two = DQN(
        "MlpPolicy",
        "CartPole-v1",
        target_update_interval=40,
        train_freq=2,
        gradient_steps=3,
        **_tiny(),
    )
    assert S.discover(two).pairs[0].every == 60  # 40 env steps = 20 rollouts x 3
    # A copy period that is no whole number of train() calls: tau 1, no period.
    odd = DQN("MlpPolicy", "CartPole-v1", target_update_interval=10, train_freq=4, **_tiny())
    assert (S.discover(odd).pairs[0].tau, S.discover(odd).pairs[0].every) == (1.0, None)
    # Two envs: each env.step() is 2 transitions, a copy every 100 // 2 calls.
    envs = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    two_envs = DQN("MlpPolicy", envs, target_update_interval=100, train_freq=5, **_tiny())
    assert S.discover(two_envs).pairs[0].every == 10
    episodes = DQN("MlpPolicy", "CartPole-v1", train_freq=(1, "episode"), **_tiny())
    assert S.discover(episodes).pairs[0].every is None


def test_dqn_with_polyak_tau_declares_the_rate_only():
    (pair,) = S.discover(DQN("MlpPolicy", "CartPole-v1", tau=0.1, **_tiny())).pairs
    assert (pair.tau, pair.every) == (0.1, None)


def test_sac_scopes_hold_actor_critic_target_and_the_entropy_coefficient(tmp_path):
    model = SAC("MlpPolicy", "Pendulum-v1", **_tiny())
    s = S.discover(model)
    assert list(s.models) == ["actor", "critic", "critic_target", "ent_coef", "policy"]
    # The entropy coefficient is SAC's own tensor, not a copy.
    (held,) = list(s.models["ent_coef"].parameters())
    assert held is model.log_ent_coef
    assert s.optimizers == [model.actor.optimizer, model.critic.optimizer, model.ent_coef_optimizer]
    (pair,) = s.pairs
    assert (pair.target, pair.online, pair.tau, pair.every) == (
        model.critic_target,
        model.critic,
        0.005,
        None,
    )
    scopes = _scopes(s, tmp_path)
    assert {"actor/latent_pi", "actor/mu", "critic/qf0", "critic_target/qf1", "ent_coef"} <= set(
        scopes
    )


def test_sac_with_a_fixed_entropy_coefficient_has_no_ent_coef_scope():
    s = S.discover(SAC("MlpPolicy", "Pendulum-v1", ent_coef=0.1, **_tiny()))
    assert "ent_coef" not in s.models and len(s.optimizers) == 2


def test_td3_pairs_both_targets_at_tau_and_knows_the_actor_delay(tmp_path):
    model = TD3("MlpPolicy", "Pendulum-v1", **_tiny())
    s = S.discover(model)
    assert list(s.models) == ["actor", "actor_target", "critic", "critic_target", "policy"]
    assert s.optimizers == [model.actor.optimizer, model.critic.optimizer]
    assert [(p.target, p.online, p.tau) for p in s.pairs] == [
        (model.actor_target, model.actor, 0.005),
        (model.critic_target, model.critic, 0.005),
    ]
    assert s.actor_every == 2
    assert {"actor/mu", "actor_target/mu", "critic/qf0", "critic_target/qf0"} <= set(
        _scopes(s, tmp_path)
    )


def test_ppo_records_the_whole_policy_under_one_root(tmp_path):
    model = PPO("MlpPolicy", "CartPole-v1", **_tiny())
    s = S.discover(model)
    assert (
        list(s.models) == ["policy"] and s.pairs == [] and s.optimizers == [model.policy.optimizer]
    )
    assert {
        "policy/mlp_extractor/policy_net",
        "policy/mlp_extractor/value_net",
        "policy/action_net",
        "policy/value_net",
    } <= set(_scopes(s, tmp_path))


def test_default_every_n_steps_meets_td3_delayed_actor_steps():
    assert _default_every(1) == 10
    assert _default_every(2) == 11
    assert _default_every(5) == 11
    # Recorded steps 0, 11, 22, 33: both phases of a 2-step delay.
    assert {s % 2 for s in range(0, 44, 11)} == {0, 1}


def test_every_n_steps_sharing_a_factor_with_policy_delay_warns(tmp_path):
    model = TD3("MlpPolicy", "Pendulum-v1", **_tiny())
    cb = GradscopeCallback(tmp_path / "td3", every_n_steps=10)
    cb.init_callback(model)
    with pytest.warns(UserWarning, match="policy_delay=2 share a factor"):
        cb.on_training_start({}, {})
    cb.on_training_end()


def test_callback_rejects_a_bad_every_n_steps():
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="every_n_steps"):
            GradscopeCallback("logs/x", every_n_steps=bad)


def test_a_bare_tensor_scope_yields_the_tensor_itself():
    t = torch.zeros(1, requires_grad=True)
    scope = S.TensorScope("log_ent_coef", t)
    assert list(scope.named_parameters()) == [("log_ent_coef", t)]
    assert next(iter(scope.parameters())) is t
