"""`tb-gradscope` and `tb-gradscope demo` on the command line: help, bad input, a real run."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from tb_gradscope import cli
from tb_gradscope.demos import spec as demo_spec
from tb_gradscope.rules import parse_rule, parse_rules_file

REPO = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = pathlib.Path(sys.executable).parent / "tb-gradscope"


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def test_help_lists_the_demo_command():
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("demo", "report", "check"):
        assert command in result.stdout


def test_demo_help_names_every_demo_and_option():
    result = run_cli("demo", "--help")
    assert result.returncode == 0
    for word in (
        "LOGDIR",
        "--only",
        "--steps",
        "--seed",
        "--env",
        "--overwrite",
        *demo_spec.DEMO_NAMES,
    ):
        assert word in result.stdout


def test_building_the_parser_does_not_import_tensorflow():
    code = (
        "import sys; from tb_gradscope import cli; cli.build_parser(); "
        "print('tensorflow' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.stdout.strip() == "False", result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["demo", "out", "--only", "nope"], "invalid choice: 'nope'"),
        (["demo", "out", "--steps", "0"], "must be a positive number of steps"),
        (["demo"], "LOGDIR"),
        ([], "COMMAND"),
    ],
)
def test_bad_arguments_exit_2_and_say_what_is_wrong(args, message, capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(args)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err


# One `tb-gradscope demo` run serves the tests below (each is a TensorFlow
# import and six recorders' traces in a process of its own): the first chosen
# demo is the one the closing hint names. torch_ddpg trains PyTorch after
# TensorFlow in the same process (which crashes unless torch._dynamo loads first).
CHOSEN = ("multihead", "dqn", "dqn3_grad_start", "torch_ddpg")


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory) -> tuple[pathlib.Path, subprocess.CompletedProcess]:
    """`tb-gradscope demo OUT --only CHOSEN --steps 6`: OUT and what it printed."""
    out = tmp_path_factory.mktemp("demo_cli")
    result = run_cli(
        "demo", str(out), "--only", *CHOSEN, "--steps", "6", "--env", "builtin", timeout=300
    )
    assert result.returncode == 0, result.stderr
    return out, result


@pytest.mark.slow
def test_demo_command_writes_the_chosen_demos_and_overwrites_one_when_asked(demo_run):
    out, result = demo_run
    assert sorted(os.listdir(out)) == sorted(CHOSEN)
    runs = out / "multihead"
    assert sorted(os.listdir(runs)) == ["clean", "leaky", "rules.toml"]
    for twin in ("clean", "leaky"):
        (event_file,) = os.listdir(runs / twin)
        assert event_file.startswith("events.out.tfevents.")
        assert f"multihead/{twin}: 6 steps" in result.stdout
    assert "6/6 multihead/leaky" in result.stderr  # the progress bar's last line of the run
    assert f"tb-gradscope check {runs} --rules {runs / 'rules.toml'}" in result.stdout
    first = sorted(os.listdir(runs / "clean"))
    untouched = sorted(os.listdir(out / "dqn" / "clean"))
    again = run_cli(
        "demo",
        str(out),
        "--only",
        "multihead",
        "--steps",
        "6",
        "--env",
        "builtin",
        "--overwrite",
        timeout=300,
    )
    assert again.returncode == 0, again.stderr
    (replaced,) = os.listdir(runs / "clean")
    assert [replaced] != first
    assert sorted(os.listdir(out / "dqn" / "clean")) == untouched  # only the chosen demo


@pytest.mark.parametrize(
    "name",
    [
        "dqn",
        "dqn_tf1",
        "dqn3_grad_start",
        "actor_critic",
        "torch_dqn",
        "torch_multihead",
        "torch_dqn3_grad_start",
        "torch_ddpg",
    ],
)
def test_check_with_a_demos_rules_file_flags_only_the_leaky_twin(name, capsys):
    demo_dir = REPO / "demo_logs" / name
    status = cli.main(["check", str(demo_dir), "--rules", str(demo_dir / "rules.toml")])
    lines = [
        line
        for line in capsys.readouterr().out.splitlines()
        if line and not line.startswith("checked")
    ]
    assert status == 1
    assert lines and all(line.startswith("leaky") for line in lines), lines


def test_committed_rules_files_list_each_demos_rules():
    for name in demo_spec.DEMO_NAMES:
        rules = parse_rules_file(str(REPO / "demo_logs" / name / "rules.toml")).rules
        expected = [parse_rule(r) for r in demo_spec.load_demo(name).rules]
        assert [str(r) for r in rules] == [str(r) for r in expected]


def test_demo_refuses_to_mix_new_runs_with_old_ones(tmp_path, capsys):
    old = tmp_path / "multihead" / "clean"
    old.mkdir(parents=True)
    (old / "events.out.tfevents.1.host.1.v2").write_bytes(b"")
    assert cli.main(["demo", str(tmp_path), "--only", "dqn", "multihead"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'multihead'} already holds demo runs" in err and "--overwrite" in err
    assert sorted(os.listdir(tmp_path)) == ["multihead"]  # nothing trained, nothing removed


def _our_warnings(stderr: str) -> list[str]:
    """The lines of `stderr` that are warnings from tb_gradscope's own code,
    TF's retracing warning about one of its functions included."""
    ours = ("tb_gradscope", "gradscope", "SummarySink", "Recorder")
    return [
        line
        for line in stderr.splitlines()
        if ("WARNING" in line or "Warning" in line or "retracing" in line)
        and any(word in line for word in ours)
    ]


@pytest.mark.slow
def test_demo_training_prints_no_warning_of_tb_gradscope(demo_run):
    # Six TF2 recorders in one process, as `make demo` trains them: TF counts
    # traces per Python function across instances and warned "5 out of the
    # last 5 calls to SummarySink._write_compiled.<locals>.write_values
    # triggered tf.function retracing" after the fifth recorder's FlowGraph.
    _, result = demo_run
    assert _our_warnings(result.stderr) == []


@pytest.mark.slow
def test_demo_command_trains_pytorch_after_tensorflow_in_one_process(demo_run):
    out, result = demo_run
    for twin in ("clean", "leaky"):
        assert f"torch_ddpg/{twin}: 6 steps" in result.stdout
        (event_file,) = os.listdir(out / "torch_ddpg" / twin)
        assert event_file.startswith("events.out.tfevents.")
