"""The demos' plain parts: built-in CartPole, replay memory, progress bar, rules as data."""

from __future__ import annotations

import io

import numpy as np
import pytest

from tb_gradscope.demos import envs
from tb_gradscope.demos.progress import ProgressBar
from tb_gradscope.demos.replay import ReplayBuffer
from tb_gradscope.demos.spec import DEMO_NAMES, load_demo
from tb_gradscope.rules import Tracks, parse_rule


def rollout(env: envs.CartPole, actions) -> list[np.ndarray]:
    out = [env.reset()]
    for a in actions:
        obs, reward, terminated, truncated = env.step(a)
        out.append(obs)
        assert reward == 1.0
        if terminated or truncated:
            break
    return out


def test_builtin_cartpole_is_repeatable_for_a_seed():
    a = rollout(envs.CartPole(seed=3), [0, 1] * 20)
    b = rollout(envs.CartPole(seed=3), [0, 1] * 20)
    c = rollout(envs.CartPole(seed=4), [0, 1] * 20)
    assert np.array_equal(np.stack(a), np.stack(b))
    assert not np.array_equal(a[0], c[0])


def test_builtin_cartpole_pole_falls_when_always_pushed_one_way():
    env = envs.CartPole(seed=0)
    env.reset()
    steps, terminated, truncated = 0, False, False
    while not (terminated or truncated) and steps < 200:
        obs, _, terminated, truncated = env.step(1)
        steps += 1
    assert terminated and not truncated and steps < 50
    assert abs(obs[2]) > 12 * 2 * np.pi / 360 or abs(obs[0]) > 2.4


def test_builtin_cartpole_truncates_at_max_steps():
    env = envs.CartPole(seed=0, max_steps=5)
    env.reset()
    flags = [env.step(t % 2)[2:] for t in range(5)]
    assert flags[-1] == (False, True) and all(f == (False, False) for f in flags[:-1])


def test_builtin_cartpole_rejects_an_unknown_action():
    env = envs.CartPole(seed=0)
    env.reset()
    with pytest.raises(ValueError, match="action must be 0 or 1"):
        env.step(2)


def test_auto_environment_is_builtin_unless_gymnasium_is_installed():
    env = envs.make_cartpole(0)
    expected = envs.GymnasiumCartPole if envs.gymnasium_available() else envs.CartPole
    assert isinstance(env, expected)
    assert isinstance(envs.make_cartpole(0, envs.BUILTIN), envs.CartPole)


def test_asking_for_gymnasium_without_it_says_how_to_install():
    if envs.gymnasium_available():
        assert isinstance(envs.make_cartpole(0, envs.GYMNASIUM), envs.GymnasiumCartPole)
        return
    with pytest.raises(ValueError, match=r"pip install 'tb-gradscope\[gym\]'"):
        envs.make_cartpole(0, envs.GYMNASIUM)


def test_replay_buffer_keeps_the_last_capacity_transitions_and_samples_them():
    buf = ReplayBuffer(capacity=4, observation_size=2, seed=0)
    for i in range(6):
        buf.add(np.full(2, i), i % 2, float(i), np.full(2, i + 1), i == 5)
    assert len(buf) == 4
    s, a, r, s2, done = buf.sample(64)
    assert set(r.tolist()) == {2.0, 3.0, 4.0, 5.0}
    assert np.array_equal(s2[:, 0], s[:, 0] + 1) and np.array_equal(done, r == 5.0)


def test_replay_buffer_refuses_to_sample_when_empty():
    with pytest.raises(ValueError, match="before any transition"):
        ReplayBuffer(4, 2, 0).sample(1)


def test_progress_bar_off_a_terminal_prints_one_final_line():
    stream = io.StringIO()
    bar = ProgressBar("dqn/clean", 10, stream)
    for i in range(1, 11):
        bar.update(i)
    bar.finish()
    (line,) = stream.getvalue().splitlines()
    assert line.startswith("[" + "#" * 30 + "] 10/10 dqn/clean")


@pytest.mark.parametrize("name", DEMO_NAMES)
def test_each_demo_states_its_rules_as_parseable_strings(name):
    demo = load_demo(name)
    assert demo.name == name and demo.twins[:2] == ("clean", "leaky")
    rules = [parse_rule(r) for r in demo.rules]
    assert [str(r) for r in rules] and all(isinstance(r, str) for r in demo.rules)
    assert any(not isinstance(r, Tracks) for r in rules)


def test_each_demo_names_its_framework_and_torch_demos_are_distinct_runs():
    from tb_gradscope.demos import spec

    assert spec.DEMO_NAMES == spec.TF_DEMO_NAMES + spec.TORCH_DEMO_NAMES
    assert len(set(spec.DEMO_NAMES)) == len(spec.DEMO_NAMES)
    assert {spec.framework(n) for n in spec.TF_DEMO_NAMES} == {"tensorflow"}
    assert {spec.framework(n) for n in spec.TORCH_DEMO_NAMES} == {"torch"}
    assert all(n.startswith("torch_") for n in spec.TORCH_DEMO_NAMES)


def test_the_default_demo_set_skips_a_missing_framework_and_says_how_to_install(
    monkeypatch, tmp_path
):
    from tb_gradscope.demos import runner, spec

    monkeypatch.setattr(spec, "installed", lambda name: spec.framework(name) != "torch")
    stream = io.StringIO()
    kept = runner._installed(list(spec.DEMO_NAMES), chosen=False, stream=stream)
    assert kept == list(spec.TF_DEMO_NAMES)
    assert "pip install 'tb-gradscope[torch]'" in stream.getvalue()
    with pytest.raises(
        ValueError, match=r"torch_dqn need torch.*pip install 'tb-gradscope\[torch\]'"
    ):
        runner.run_demos(str(tmp_path), only=["dqn", "torch_dqn"], stream=stream)
    assert list(tmp_path.iterdir()) == []  # refused before writing anything


def test_torch_demo_modules_import_no_tensorflow():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from tb_gradscope.demos import spec\n"
        "for name in spec.TORCH_DEMO_NAMES: spec.load_demo(name)\n"
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"


def test_the_tf_and_torch_ema_lstm_demos_train_on_the_same_task():
    from tb_gradscope.demos import ema_lstm, ema_lstm_task

    for name in ("GAMMA", "DECAY", "WINDOW", "UNITS", "BATCH", "RULES"):
        assert getattr(ema_lstm, name) == getattr(ema_lstm_task, name), name
    tf_windows = ema_lstm.sample_windows(np.random.default_rng(3), 4)
    torch_windows = ema_lstm_task.sample_windows(np.random.default_rng(3), 4)
    assert all(np.array_equal(a, b) for a, b in zip(tf_windows, torch_windows))
