"""Silent data loss (issue 15, item 3): TF's writer says nothing when the
logdir is deleted, and a full disk makes its flush fail inside the training
step. The recorder notices, warns once, reopens, training finishes, and the
steps after the fault is healed are readable.

Each case trains a real recorded loop in a subprocess
(tests/support/reliability1_dataloss.py) and reads the logdir back through
TensorBoard's ingestion (the CLI's `load_logdir`).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest

from tb_gradscope.read.logdir import load_logdir

STEPS, FAULT_AT, HEAL_AT = 24, 8, 14
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def _train(tmp_path, fault: str) -> tuple[dict, list[int], str]:
    logdir = str(tmp_path / "run")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.reliability1_dataloss",
            logdir,
            fault,
            str(STEPS),
            str(FAULT_AT),
            str(HEAL_AT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    (logs,) = load_logdir(str(tmp_path))
    return result, sorted(logs.grads), done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("fault", ["delete", "full"])
def test_lost_event_file_is_noticed_reopened_and_later_steps_readable(tmp_path, fault):
    result, steps, stderr = _train(tmp_path, fault)
    assert result["trained"] == STEPS and math.isfinite(result["loss"])
    assert "Traceback" not in stderr
    (warning,) = result["warnings"]  # one clear warning, not one per step
    assert ("no event file left" if fault == "delete" else "file size limit") in warning
    assert result["losses"] >= 1
    if fault == "delete":
        # The deleted steps are gone with the directory; the recorder makes
        # the directory again itself, so every step after the fault is kept.
        assert result["reopened"] >= 1
        recoverable = range(FAULT_AT + 1, STEPS)
    else:
        # The records wait in memory while the file cannot grow, and are
        # written once it can: every step is kept.
        recoverable = range(STEPS)
    missing = sorted(set(recoverable) - set(steps))
    assert missing == [], f"recoverable steps lost: {missing}; read back: {steps}"
    lost = sorted(set(range(STEPS)) - set(steps))
    print(
        f"\n{fault}: 1 fault at step {FAULT_AT} (healed at {HEAL_AT}), {STEPS} of {STEPS} "
        f"steps trained; {len(lost)} step(s) not readable {lost}, recoverable steps lost: 0; "
        f"{result['reopened']} reopen(s), {len(result['warnings'])} warning"
    )
