"""`tb-gradscope check`: exit 0 clean, 1 on any violation, 2 on bad usage or unreadable logs."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from tb_gradscope.commands import main
from tests.support import rules_fixtures as rf


def check(*argv: str) -> tuple[int, str, str]:
    from tb_gradscope.commands import build_parser

    args = build_parser().parse_args(["check", *argv])
    out, err = io.StringIO(), io.StringIO()
    return args.run(args, out, err), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> str:
    return rf.dqn_logdir(tmp_path_factory.mktemp("dqn_logs"))


@pytest.fixture
def rules_file(tmp_path) -> str:
    path = tmp_path / "rules.toml"
    path.write_text('rules = ["never(td, target/*)", "blocked(td, target)"]\n', encoding="utf-8")
    return str(path)


def test_leaky_run_exits_1_with_one_line_per_violation(logdir, rules_file):
    code, out, err = check(logdir, "--rules", rules_file, "--run", "leaky")
    assert code == 1, err
    lines = out.splitlines()
    # One line per broken rule, its trace-time and run-time breaches together.
    never = [line for line in lines if line.startswith("leaky  never(td, target/*)")]
    assert len(never) == 1, lines
    assert "at trace, and at 3 steps (0-20)" in never[0]
    assert "missing cut on target/l1 -> loss:td" in never[0]
    assert "gradient norm 0.25" in never[0]
    assert len(lines) == len({line.split("  ")[1] for line in lines}) <= 2, lines
    assert "blocked(td, target)" in out
    assert f"{len(lines)} violation(s)" in err


def test_clean_run_exits_0(logdir, rules_file):
    code, out, err = check(logdir, "--rules", rules_file, "--run", "clean")
    assert (code, out) == (0, "")
    assert "no violations" in err


def test_recorded_violation_fails_without_rules_and_escapes_control_characters(logdir):
    code, out, err = check(logdir, "--run", "recorded")
    assert code == 1
    assert "\x1b" not in out
    assert "target/\\x1b[31mred" in out and "(recorded)" in out


def test_no_rules_and_none_recorded_exits_0_and_says_so(logdir):
    code, out, err = check(logdir, "--run", "clean")
    assert (code, out) == (0, "")
    assert "no rules given and none recorded" in err


def test_broken_rules_file_exits_2_naming_file_and_line(logdir, tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text('rules = [\n  "never(td, target/*)",\n  "never(td)",\n]\n', encoding="utf-8")
    code, out, err = check(logdir, "--rules", str(path))
    assert code == 2 and out == ""
    assert f"{path}:3: " in err and "never(LOSS, SCOPE)" in err


def test_missing_logdir_exits_2(tmp_path):
    code, _, err = check(str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in err


def test_logdir_without_gradscope_data_exits_2_and_says_so(tmp_path):
    writer = tf.summary.create_file_writer(str(tmp_path / "scalars_only"))
    with writer.as_default():
        tf.summary.scalar("loss", 1.0, step=0)
    writer.close()
    code, _, err = check(str(tmp_path))
    assert code == 2
    assert "has no gradscope data (1 TensorBoard run(s), none with gradscope records)" in err
    code, _, err = check(str(tmp_path / "scalars_only" / ".."), "--run", "other")
    assert code == 2


def test_rule_matching_no_run_is_reported_as_a_typo(logdir, tmp_path):
    path = tmp_path / "rules.toml"
    path.write_text('rules = ["never(td, target/*)", "never(q, online)"]\n', encoding="utf-8")
    code, out, err = check(logdir, "--rules", str(path))
    assert code == 1
    typo = [line for line in out.splitlines() if "never(q, online)" in line]
    assert len(typo) == 3 and all("rule names loss 'q'" in line for line in typo)  # once per run


def test_rule_that_applies_to_some_runs_only_is_skipped_elsewhere(tmp_path):
    from tb_gradscope import format as fmt

    rf.write_records(str(tmp_path / "logs" / "dqn"), rf.dqn_records(leaky=False))
    info = fmt.make_info(fmt.Kind.GRAD_STATS, "q", ["net"])
    rf.write_records(str(tmp_path / "logs" / "other"), [(info, 0, [[1.0, 0.3, 0.3, 0.0, 0.0]])])
    path = tmp_path / "rules.toml"
    path.write_text('rules = ["never(td, target/*)"]\n', encoding="utf-8")
    code, out, err = check(str(tmp_path / "logs"), "--rules", str(path))
    assert (code, out) == (0, ""), err
    assert "run other: rule never(td, target/*) does not apply" in err


def test_console_script_exit_codes(logdir, rules_file, tmp_path):
    """The real processes: `python -m tb_gradscope.commands` and the
    `tb-gradscope` console script (needs check registered in cli.py)."""
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    leaky = subprocess.run(
        [sys.executable, "-m", "tb_gradscope.commands", "check", logdir, "--rules", rules_file],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert leaky.returncode == 1, leaky.stderr
    assert "leaky  never(td, target/*)  at trace, and at" in leaky.stdout
    script = shutil.which("tb-gradscope", path=os.path.dirname(sys.executable))
    missing = subprocess.run(
        [script, "check", str(tmp_path / "nope")], capture_output=True, text=True, timeout=120
    )
    assert missing.returncode == 2, missing.stderr
    assert "does not exist" in missing.stderr
    usage = subprocess.run([script, "check"], capture_output=True, text=True, timeout=120)
    assert usage.returncode == 2 and "LOGDIR" in usage.stderr


def test_in_process_main_parses_like_the_console(logdir, rules_file, capsys):
    assert main(["check", logdir, "--run", "clean", "--rules", rules_file]) == 0
    with pytest.raises(SystemExit) as caught:
        main(["check", "--help"])
    assert caught.value.code == 0
    assert "exit status: 0 no violation, 1 any violation, 2" in capsys.readouterr().out


def test_rules_a_run_recorded_are_checked_without_rules_file(tmp_path):
    from tb_gradscope import format as fmt

    records = rf.dqn_records(leaky=True)
    info, step, docs = records[0]
    assert info.kind == fmt.Kind.FLOWGRAPH
    with_rules = fmt.make_info(
        fmt.Kind.FLOWGRAPH, attrs={"rules": ["never(td, target/*)", "bogus("]}
    )
    rf.write_records(str(tmp_path / "run"), [(with_rules, step, docs)] + records[1:])
    code, out, err = check(str(tmp_path))
    assert code == 1
    assert out.count("never(td, target/*)") == 1  # trace time and steps, one line
    assert "ignored a recorded rule" in err and "bogus(" in err


@pytest.mark.slow
def test_check_on_real_recorder_logs_fails_the_leak_and_passes_the_fix(tmp_path_factory, tmp_path):
    logdir = rf.actor_critic_logdir(tmp_path_factory)
    path = tmp_path / "rules.toml"
    path.write_text(
        f'rules = ["{rf.LEAK_RULE}", "blocked(actor, ac/critic_head)"]\n', encoding="utf-8"
    )
    code, out, _ = check(logdir, "--rules", str(path), "--run", "leaky")
    assert code == 1
    assert (
        "leaky  never(actor, ac/critic_head)  at trace, and at 2 steps (0-2)  loss 'actor' reaches scope "
        "'ac/critic_head' with gradient norm"
    ) in out
    # blocked(...) broken in the same words: folded under never(...), one line for one problem.
    assert out.count("\n") == 1 and "(also breaks blocked(actor, ac/critic_head))" in out
    assert check(logdir, "--rules", str(path), "--run", "clean")[0] == 0


def test_logdir_whose_records_are_all_unreadable_exits_2_saying_why(tmp_path):
    import dataclasses

    from tb_gradscope import format as fmt

    info = dataclasses.replace(
        fmt.make_info(fmt.Kind.GRAD_STATS, "td", ["net"]), version=fmt.FORMAT_VERSION + 1
    )
    rf.write_records(str(tmp_path / "future"), [(info, 0, [[1.0, 0.5, 0.5, 0.0, 0.0]])])
    code, out, err = check(str(tmp_path))
    assert (code, out) == (2, "")
    assert "none can be read" in err and "newer tb-gradscope" in err


def test_scope_layout_change_mid_run_is_merged_by_step(tmp_path):
    """Variables created after the first recorded step start `~1` tags."""
    from tb_gradscope import format as fmt

    first = fmt.make_info(fmt.Kind.GRAD_STATS, "td", ["online"])
    later = fmt.make_info(fmt.Kind.GRAD_STATS, "td", ["online", "target"])
    rf.write_records(
        str(tmp_path / "run"),
        [
            (first, 0, [[1.0, 0.5, 0.5, 0.0, 0.0]]),
            (first, 10, [[1.0, 0.5, 0.5, 0.0, 0.0]]),
            (later, 20, [[1.0, 0.5, 0.5, 0.0, 0.0], [1.0, 0.125, 0.1, 0.0, 0.0]], 1),
        ],
    )
    path = tmp_path / "rules.toml"
    path.write_text('rules = ["never(td, target/*)"]\n', encoding="utf-8")
    code, out, err = check(str(tmp_path), "--rules", str(path))
    assert code == 1, err
    (line,) = out.splitlines()
    assert line.startswith("run  never(td, target/*)  at step 20") and "gradient norm 0.125" in line
