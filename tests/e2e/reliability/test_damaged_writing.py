"""Writing faults at the recorder's default flush settings (issue 24): a full
disk, a read-only event file or a deleted logdir from step FAULT_AT to
HEAL_AT, every step recorded. Records queued before and during the fault
stay in memory and are written after the heal; what had to be dropped (the
file itself gone) is said by a `dropped` event; recording resumes at the next
recorded step; no empty event file and no scratch directory is left.

Each case trains a real recorded loop in a subprocess
(tests/support/damaged_writing_run.py) and reads the logdir back with the CLI's
`load_logdir`. With -s each prints the steps it lost.
"""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest

from tb_gradscope import format as fmt
from tb_gradscope.read.logdir import load_logdir

STEPS, FAULT_AT, HEAL_AT = 300, 100, 200
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _train(tmp_path, fault: str) -> tuple[dict, list[int], list[fmt.Event], str]:
    logdir, scratch = tmp_path / "logs" / "run", tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.damaged_writing_run",
            str(logdir),
            fault,
            str(STEPS),
            str(FAULT_AT),
            str(HEAL_AT),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
        env={**os.environ, "TMPDIR": str(scratch)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    files = glob.glob(str(logdir / "*tfevents*"))
    assert files and all(os.path.getsize(p) > 0 for p in files), "an empty event file was left"
    assert os.listdir(scratch) == [], "a scratch directory was left"
    (logs,) = load_logdir(str(tmp_path / "logs"))
    dropped = [e for e in logs.events if e.type == fmt.DROPPED]
    return result, sorted(logs.grads), dropped, "\n".join(logs.warnings)


def _report(fault: str, steps: list[int], result: dict) -> None:
    lost = sorted(set(range(STEPS)) - set(steps))
    runs = [(lost[0], lost[0])] if lost else []
    for s in lost[1:]:
        runs[-1:] = [(runs[-1][0], s)] if s == runs[-1][1] + 1 else [runs[-1], (s, s)]
    print(
        f"\n{fault} from step {FAULT_AT} to {HEAL_AT}: {len(lost)} of {STEPS} steps lost "
        f"{[f'{a}..{b}' for a, b in runs]}; {result['reopened']} reopen(s), "
        f"{len(result['warnings'])} warning(s), dropped {result['dropped']}"
    )


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["full", "readonly"])
def test_records_held_during_a_fault_are_written_after_it_heals(tmp_path, fault):
    if fault == "readonly" and (os.geteuid() != 0 or not shutil.which("chattr")):
        pytest.skip("chattr +i needs root (CAP_LINUX_IMMUTABLE)")
    result, steps, dropped, _ = _train(tmp_path, fault)
    _report(fault, steps, result)
    assert steps == list(range(STEPS)), "every step, those of the fault included, is readable"
    assert result["dropped"] == [] and dropped == []
    (warning,) = result["warnings"]
    assert ("file size limit" if fault == "full" else "read-only") in warning


@pytest.mark.slow
def test_a_deleted_logdir_costs_only_the_steps_queued_since_the_last_flush(tmp_path):
    result, steps, dropped, _ = _train(tmp_path, "delete")
    _report("delete", steps, result)
    ((first, last, records),) = result["dropped"]
    # The last flush before the fault may fall on any step up to FAULT_AT - 1
    # (every FLUSH_RECORDS records or FLUSH_SECS, whichever comes first).
    assert first <= FAULT_AT <= last, "the queued records lost with the deleted file"
    assert steps == list(range(last + 1, STEPS)), "recording resumes at the next recorded step"
    (event,) = dropped
    assert event.step == last and event.evidence == {
        "records": records,
        "first_step": first,
        "last_step": last,
    }
    assert (
        f"recorded steps {first}..{last}" in event.message and "no event file left" in event.message
    )
