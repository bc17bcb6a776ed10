"""The bench plumbing works: run_all reads `name: value` lines, every bench answers --help.

No timing is asserted here; the figures live in docs/PERFORMANCE.md.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from bench import harness, run_all

ROOT = pathlib.Path(__file__).resolve().parents[3]
BENCHES = sorted(p.stem for p in (ROOT / "bench").glob("bench_*.py"))


def test_parse_lines_keeps_name_value_lines_in_order():
    out = "== bench_x\nsome log line: with spaces\na_ratio: 1.02\nnote:no-space\nheadline_ratio: 0.99\n"
    values = run_all.parse_lines(out)
    assert values == {"a_ratio": "1.02", "headline_ratio": "0.99"}
    assert list(values.items())[-1] == ("headline_ratio", "0.99")


def test_parse_lines_ignores_log_lines_whose_prefix_has_spaces():
    # TF's own logging goes to stderr, which run_all does not parse; a stray
    # log line on stdout is skipped when its prefix has a space.
    out = "I0000 00:00:1.0 port.cc:153] oneDNN custom operations are on.\nx: 1\n"
    assert run_all.parse_lines(out) == {"x": "1"}


def test_parse_lines_takes_a_repeated_headline_as_the_last_line():
    # bench_analysis prints its headline once in the table and again last.
    out = "ratio_10k: 0.02\nlinearity: 1.1\nratio_10k: 0.03\n"
    values = run_all.parse_lines(out)
    assert list(values.items()) == [("linearity", "1.1"), ("ratio_10k", "0.03")]


def test_report_prints_what_parse_lines_reads(capsys):
    harness.report("ratio", 1.0234567)
    harness.report("count", 3)
    harness.report("note", "unavailable (no /proc)")
    values = run_all.parse_lines(capsys.readouterr().out)
    assert values == {"ratio": "1.02346", "count": "3", "note": "unavailable (no /proc)"}


def test_interleaved_medians_runs_each_candidate_every_round():
    calls = []
    medians = harness.interleaved_medians(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 3
    )
    assert calls == ["a", "b"] * 3
    assert set(medians) == {"a", "b"}


def test_interleaved_samples_keeps_every_time_of_every_candidate():
    calls = []
    samples = harness.interleaved_samples(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, 4
    )
    assert calls == ["a", "b"] * 4
    assert {name: len(times) for name, times in samples.items()} == {"a": 4, "b": 4}
    assert all(t >= 0 for times in samples.values() for t in times)


def test_rotated_samples_rotates_the_order_and_keeps_one_sample_per_round():
    calls = []
    wall, cpu = harness.rotated_samples({n: (lambda n=n: calls.append(n)) for n in "abc"}, 4)
    assert calls == list("abcbcacababc")
    assert {n: (len(wall[n]), len(cpu[n])) for n in "abc"} == {n: (4, 4) for n in "abc"}


def test_median_ratio_pairs_the_runs_of_one_round():
    # The machine slows down over the rounds; each round's two runs slow alike.
    samples = {"ours": [1.1, 2.2, 4.4], "base": [1.0, 2.0, 4.0]}
    assert harness.median_ratio(samples, "ours", "base") == pytest.approx(1.1)
    samples = {
        "ours": [1.0, 5.0, 5.0],
        "base": [4.0, 1.0, 4.0],
    }  # medians 5 / 4; per round 0.25, 5, 1.25
    assert harness.median_ratio(samples, "ours", "base") == pytest.approx(1.25)


def test_bench_plugin_names_sizes_as_its_runs_and_lines_do():
    from bench import bench_plugin

    assert [bench_plugin.label(n) for n in bench_plugin.FULL_SIZES] == ["1k", "10k", "100k"]
    assert set(bench_plugin.QUICK_SIZES) <= set(bench_plugin.FULL_SIZES)


def test_bench_parts_counts_an_op_towards_the_part_its_scope_names():
    from bench import bench_parts

    assert bench_parts.part_of("tb_gradscope/drift/concat:ConcatV2") == "drift"
    assert bench_parts.part_of("tb_gradscope/write/PartitionedCall/x/Sum:Sum") == "write"
    assert bench_parts.part_of("online_1/l1_1/Relu:_MklNativeFusedMatMul") is None
    assert bench_parts.part_of("KernelAndDeviceFunc::Run") is None  # not an op
    assert bench_parts.part_of("tb_gradscope/drift") is None  # a scope, no op type


def test_bench_parts_reads_each_op_of_a_profiled_function():
    import tensorflow as tf

    from bench import bench_parts

    x = tf.Variable(tf.ones([64]))

    @tf.function
    def step(x):
        with tf.name_scope("tb_gradscope/drift"):
            return tf.reduce_sum(tf.square(x.read_value()))

    step(x)
    spent = bench_parts.profile(step, (x,), calls=5)
    drift = {e for e in spent if bench_parts.part_of(e) == "drift"}
    assert any(e.endswith(":Square") for e in drift), sorted(spent)[:20]
    assert all(spent[e] > 0 for e in drift)
    assert spent[bench_parts.FUNCTION_RUN] > 0


def test_bench_list_includes_the_overhead_scaling_and_memory_benches():
    assert {"bench_overhead", "bench_scaling", "bench_memory"} <= set(BENCHES)


@pytest.fixture(scope="module")
def help_outputs():
    """`python -m bench.<name> --help` for every bench and run_all, run in parallel (imports are slow)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    procs = {
        name: subprocess.Popen(
            [sys.executable, "-m", f"bench.{name}", "--help"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in BENCHES + ["run_all"]
    }
    results = {}
    for name, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        results[name] = (proc.returncode, out, err)
    return results


@pytest.mark.parametrize("name", BENCHES + ["run_all"])
def test_every_bench_answers_help(help_outputs, name):
    code, out, err = help_outputs[name]
    assert code == 0, f"bench.{name} --help exited {code}: {err[-1500:]}"
    assert "--quick" in out, f"bench.{name} --help does not offer --quick:\n{out}"
