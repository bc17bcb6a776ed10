"""`tb-gradscope report/check` over damaged logs (issue 24): never a
traceback; exit 2 when what was asked could not be read (1 stays "violations
found"); a FIFO named like an event file is never opened; a record header
claiming 2^40 bytes costs only what follows it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tb_gradscope import cli
from tb_gradscope import format as fmt
from tests.e2e.reliability.test_damaged_records import CASES
from tests.support import damaged_logs as dl


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tb_gradscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _no_traceback(done: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in done.stdout + done.stderr, done.stderr[-3000:]


@pytest.fixture(scope="module")
def logdir(tmp_path_factory):
    """Every damage of test_damaged_records, plus a header claiming 2^40 bytes."""
    root = str(tmp_path_factory.mktemp("damaged_cli"))
    for run, damage in CASES.items():
        dl.write_run(root, run, damage.records, damage.data)
    records = dl.RunPlan().records()
    huge = dl.damage_bytes(records, len(records) // 2, "huge_length")
    dl.write_run(root, "bytes.huge_length", huge.records, huge.data)
    return root


def test_report_reads_every_damaged_run_without_a_traceback(logdir):
    done = _cli("report", logdir, "--format", "json")
    _no_traceback(done)
    assert done.returncode == 0, done.stderr
    runs = {r["run"]: r for r in json.loads(done.stdout)["runs"]}
    assert set(runs) == set(CASES) | {"bytes.huge_length"}
    steps = list(dl.RunPlan().steps)
    for run in CASES:
        assert runs[run]["recorded_steps"]["count"] >= 1, run
    assert runs["events.step_str"]["recorded_steps"]["count"] == len(steps)
    assert any("step 2" in w and "'step'" in w for w in runs["events.step_str"]["warnings"])
    assert any("state_scopes" in w for w in runs["drift.attrs.state_scopes_int"]["warnings"])
    huge = runs["bytes.huge_length"]
    assert any("claims 1099511627776 bytes" in w for w in huge["warnings"]), huge["warnings"]
    assert huge["recorded_steps"]["count"] >= 1  # the records before it


def test_check_over_damaged_runs_reports_violations_not_a_crash(logdir):
    done = _cli("check", logdir)
    _no_traceback(done)
    assert done.returncode == 1, done.stderr  # the runs' recorded rule is broken: td reaches target
    assert "never(td, target/*)" in done.stdout
    assert "warning: run 'events.loss_list'" in done.stderr


def _fifo_logdir(tmp_path) -> str:
    records = dl.RunPlan().records()
    dl.write_run(str(tmp_path), "good", records)
    os.mkfifo(tmp_path / "good" / "events.out.tfevents.2000.fifo")
    (tmp_path / "only_fifo").mkdir()
    os.mkfifo(tmp_path / "only_fifo" / "events.out.tfevents.2000.fifo")
    return str(tmp_path)


@pytest.mark.parametrize("command", ["report", "check"])
def test_a_fifo_named_like_an_event_file_is_never_opened(tmp_path, command):
    logdir = _fifo_logdir(tmp_path)
    done = _cli(command, logdir, timeout=60)  # a blocked read would time out
    _no_traceback(done)
    assert done.returncode in (0, 1), done.stderr
    assert "events.out.tfevents.2000.fifo' is a FIFO: not read" in done.stdout + done.stderr


def test_a_logdir_of_fifos_only_exits_2_naming_them(tmp_path):
    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run" / "events.out.tfevents.1.fifo")
    done = _cli("check", str(tmp_path), timeout=60)
    _no_traceback(done)
    assert done.returncode == 2
    assert "no gradscope data" in done.stderr and "is a FIFO" in done.stderr


def _unreadable_grads_logdir(root: str, runs: tuple[str, ...]) -> None:
    """Runs whose every grad_stats table has one row more than its metadata
    lists scopes: nothing can be checked at a recorded step."""
    for run in runs:
        records = dl.RunPlan(events_per_step=0).records()
        for record in records:
            if record.info.kind == fmt.Kind.GRAD_STATS:
                dl.TABLE_DAMAGES["rows_not_labels"](record)
        dl.write_run(root, run, records)


def test_check_exits_2_when_no_gradient_table_could_be_read(tmp_path):
    _unreadable_grads_logdir(str(tmp_path), ("unreadable",))
    done = _cli("check", str(tmp_path))
    _no_traceback(done)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "run unreadable: not checked at any recorded step" in done.stderr
    assert "no violations" not in done.stderr.replace("no violations in what could be read", "")
    assert "shape (5, 5), metadata says (4, 5)" in done.stderr


def test_check_still_exits_1_when_another_run_breaks_a_rule(tmp_path):
    _unreadable_grads_logdir(str(tmp_path), ("unreadable",))
    dl.write_run(str(tmp_path), "readable", dl.RunPlan().records())
    done = _cli("check", str(tmp_path))
    _no_traceback(done)
    assert done.returncode == 1
    assert "checked 2 run(s), 1 of them not at any recorded step" in done.stderr
    assert "run unreadable: not checked" in done.stderr


def test_an_unexpected_error_is_one_line_and_exit_2(monkeypatch, tmp_path, capsys):
    from tb_gradscope.read import logdir

    def explode(*_args, **_kwargs):
        raise MemoryError("\x1b[2Jout of memory reading a record")

    monkeypatch.setattr(logdir, "load_logdir", explode)
    assert cli.main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "tb-gradscope report: could not finish: MemoryError" in err and "\x1b" not in err
