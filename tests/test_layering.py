"""The readers' side never pulls in tensorflow (TensorBoard must start fast)."""

from __future__ import annotations

import subprocess
import sys

READ_SIDE = [
    "tb_gradscope",
    "tb_gradscope.format",
    "tb_gradscope.scopes",
    "tb_gradscope.plugin.plugin",
    "tb_gradscope.plugin.loader",
    "tb_gradscope.rules",
    "tb_gradscope.read.flowstate",
    "tb_gradscope.commands.report",
    "tb_gradscope.commands.check",
    "tb_gradscope.anomalies",
    "tb_gradscope.pairs.series",
]


def test_read_side_does_not_import_tensorflow():
    code = (
        "import sys\n"
        + "".join(f"import {m}\n" for m in READ_SIDE)
        + "bad = sorted(m for m in sys.modules if m == 'tensorflow' or m.startswith('tensorflow.') or m == 'keras')\n"
        + "print(','.join(bad))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "", f"imported: {result.stdout.strip()}"
