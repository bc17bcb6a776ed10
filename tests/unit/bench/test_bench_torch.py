"""bench_torch's parts do what it says: the variants train the same step, the hand
loggers write what PyTorch users write, the headlines are the worst of their models.

No timing is asserted here; the figures live in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from bench import bench_torch, torch_steps  # noqa: E402


def _tags(logdir) -> dict[str, int]:
    """{tag: number of values} of the scalar and histogram events under `logdir`."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "histograms": 0})
    acc.Reload()
    tags = acc.Tags()
    return {
        **{t: len(acc.Scalars(t)) for t in tags["scalars"]},
        **{t: len(acc.Histograms(t)) for t in tags["histograms"]},
    }


@pytest.mark.parametrize("name", list(torch_steps.BUILDERS))
def test_every_model_starts_from_the_same_weights_and_trains(name):
    a, b = torch_steps.make(name, "cpu"), torch_steps.make(name, "cpu")
    for root in a.models:
        for p, q in zip(a.models[root].parameters(), b.models[root].parameters()):
            assert torch.equal(p, q), (name, root)
    before = [p.detach().clone() for p in a.models[next(iter(a.models))].parameters()]
    variant = torch_steps.Plain()
    losses = [a.train_step(variant).item() for _ in range(3)]
    assert variant.steps == 3 and all(map(torch.isfinite, map(torch.tensor, losses)))
    after = list(a.models[next(iter(a.models))].parameters())
    assert any(not torch.equal(x, y) for x, y in zip(before, after)), "the step trains nothing"


def test_the_hand_scalar_logger_writes_each_parameter_and_the_global_norm_every_n_steps(tmp_path):
    model = torch_steps.make("dqn32", "cpu")
    logger = torch_steps.HandScalars(str(tmp_path), every=10)
    for _ in range(20):
        model.train_step(logger)
    logger.close()
    names = [f"grad_norm/online/{n}" for n, _ in model.models["online"].named_parameters()]
    assert _tags(tmp_path) == {**{n: 2 for n in names}, "grad_norm/global": 2}


def test_the_histogram_logger_writes_one_histogram_per_parameter_of_both_ddpg_networks(tmp_path):
    model = torch_steps.make("ddpg", "cpu")
    logger = torch_steps.HandHistograms(str(tmp_path), every=10)
    for _ in range(11):
        model.train_step(logger)
    logger.close()
    tags = _tags(tmp_path)
    expected = {
        f"grad/{root}/{n}": 2
        for root in ("actor", "critic")
        for n, _ in model.models[root].named_parameters()
    }
    assert tags == expected


def test_hand_loggers_train_bitwise_like_the_plain_step(tmp_path):
    plain, logged = torch_steps.make("dqn32", "cpu"), torch_steps.make("dqn32", "cpu")
    logger = torch_steps.HandScalars(str(tmp_path), every=1)
    for _ in range(5):
        plain.train_step(torch_steps.Plain())
        logged.train_step(logger)
    logger.close()
    for p, q in zip(plain.models["online"].parameters(), logged.models["online"].parameters()):
        assert torch.equal(p, q)


def test_the_1m_mlp_has_about_a_million_parameters():
    assert 1_000_000 <= torch_steps.parameter_count(torch_steps.make("mlp1m", "cpu")) < 1_100_000


def test_headlines_are_the_worst_of_the_dqn_and_ddpg_models_only():
    ratios = {
        "dqn32": {"ours1_vs_hand1": 0.9, "idle": 1.002, "ours10_vs_hand10": 1.01},
        "dqn256": {"ours1_vs_hand1": 1.1, "idle": 1.0, "ours10_vs_hand10": 0.98},
        "ddpg": {"ours1_vs_hand1": 0.8, "idle": 1.004, "ours10_vs_hand10": 1.02},
        "mlp1m": {"ours1_vs_hand1": 9.0, "idle": 9.0, "ours10_vs_hand10": 9.0},
    }
    assert bench_torch.headlines(ratios) == {
        "torch_every_step_vs_hand": 1.1,
        "torch_nothing_due_ratio": 1.004,
        "torch_overhead_vs_hand_logger": 1.02,
    }
    assert list(bench_torch.headlines(ratios))[-1] == "torch_overhead_vs_hand_logger"


def test_steps_per_run_hold_whole_recording_periods():
    for plan in bench_torch.PLAN.values():
        assert all(steps % bench_torch.EVERY == 0 for _, steps in plan.values())
        assert set(plan) == set(torch_steps.BUILDERS)


@pytest.mark.parametrize("name", ["dqn32", "ddpg"])
def test_ours_trains_bitwise_like_the_plain_step_and_records_its_pairs(tmp_path, name):
    from tb_gradscope.read.logdir import load_logdir

    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        plain, ours = torch_steps.make(name, "cpu"), torch_steps.make(name, "cpu")
        rec = torch_steps.Ours(str(tmp_path), every=10, model=ours)
        for _ in range(11):
            ours.train_step(rec)
            plain.train_step(torch_steps.Plain())
        rec.close()
    finally:
        torch.use_deterministic_algorithms(deterministic)
    for root in plain.models:
        for p, q in zip(plain.models[root].parameters(), ours.models[root].parameters()):
            assert torch.equal(p, q), (name, root)
    (run,) = load_logdir(str(tmp_path))
    assert run.steps == [0, 10]
    assert len(run.drift) == len(ours.pairs) >= 1
    assert run.recorded_rules == ours.rules


@pytest.mark.parametrize("name", ["dqn32", "ddpg"])
def test_the_device_passes_floor_trains_bitwise_and_moves_each_pairs_differences(name):
    plain, floor = torch_steps.make(name, "cpu"), torch_steps.make(name, "cpu")
    passes = torch_steps.DevicePasses(floor)
    for _ in range(3):
        plain.train_step(torch_steps.Plain())
        floor.train_step(passes)
    passes.end_run()
    for root in plain.models:
        for p, q in zip(plain.models[root].parameters(), floor.models[root].parameters()):
            assert torch.equal(p, q), root
    # The step's end moved: the update and value norms of every parameter, then
    # per pair its four differences (the first: target - online, now).
    n_params = len(passes.params)
    assert passes.moved is not None and passes.moved.ndim == 1
    target, online = passes.pairs[0]
    first = [float(torch.linalg.vector_norm(t - o)) for t, o in zip(target, online)]
    got = passes.moved[-(2 * n_params + 4 * sum(len(t) for t, _ in passes.pairs)) :]
    got = got[2 * n_params : 2 * n_params + len(target)]
    assert got == pytest.approx(first, rel=1e-6)
