"""rules, testing (until it traces), report and check never import tensorflow,
not even through TensorBoard's ingestion."""

from __future__ import annotations

import subprocess
import sys

from tests.support import rules_fixtures as rf


def test_report_and_check_run_without_importing_tensorflow(tmp_path):
    logdir = rf.dqn_logdir(tmp_path)
    code = (
        "import sys\n"
        "import tb_gradscope.rules, tb_gradscope.testing\n"
        "from tb_gradscope.commands import main\n"
        f"codes = [main(['check', {logdir!r}, '--run', 'recorded']), main(['report', {logdir!r}, '--format', 'json'])]\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))\n"
        "print('RESULT', codes, bad)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=str(tmp_path)
    )
    last = [line for line in result.stdout.splitlines() if line.startswith("RESULT")]
    assert last == ["RESULT [1, 0] []"], result.stderr[-2000:]
