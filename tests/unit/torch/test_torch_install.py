"""Installed without a framework: `tb_gradscope.torch` never imports tensorflow and
works where it is absent; a recorder whose framework is missing says what to install."""

from __future__ import annotations

import subprocess
import sys

# Python's own way to make a package unimportable, as if not installed: None in
# sys.modules (`import` raises ModuleNotFoundError, `importlib.util.find_spec`
# answers None, as torch's optional-dependency probes expect).
_BLOCK = """
import sys
for name in {blocked!r}:
    sys.modules[name] = None
"""


def _run(blocked: tuple[str, ...], code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", _BLOCK.format(blocked=set(blocked)) + code],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_torch_recorder_records_where_tensorflow_is_not_installed(tmp_path):
    code = f"""
import torch
from tb_gradscope.torch import Recorder
net = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(net.parameters(), 0.1)
with Recorder({str(tmp_path)!r}, every_n_steps=1, models={{"net": net}}, optimizers=[opt]) as rec:
    rec.backward({{"l": net(torch.ones(3, 2)).pow(2).mean()}})
    opt.step()
from tb_gradscope.read.logdir import load_logdir
(run,) = load_logdir({str(tmp_path)!r})
print(run.flowgraph.source, run.grad_steps, sorted(m for m, v in sys.modules.items() if m.startswith("tensorflow") and v is not None))
"""
    result = _run(("tensorflow", "keras", "tf_keras"), code)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "torch [0] []"


def test_a_tf_recorder_without_tensorflow_says_to_install_it():
    result = _run(("tensorflow", "keras"), "from tb_gradscope import Recorder\n")
    assert result.returncode != 0
    assert "pip install 'tb-gradscope[tensorflow]'" in result.stderr


def test_the_torch_recorder_without_torch_says_to_install_it():
    result = _run(("torch",), "import tb_gradscope.torch\n")
    assert result.returncode != 0
    assert "pip install 'tb-gradscope[torch]'" in result.stderr
