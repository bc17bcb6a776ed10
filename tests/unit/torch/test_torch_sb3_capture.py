"""SB3's DQN and PPO clip the gradients between backward and step
(`clip_grad_norm_`), inside the step that watch mode opens: the analysis
capture must see that in-place `_foreach_mul_` through, as it does in any
`with rec.step():` block."""

from __future__ import annotations

import torch

from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import Recorder


def test_clipping_gradients_inside_a_step_block_leaves_the_capture_whole(tmp_path):
    torch.manual_seed(0)
    a, b = torch.nn.Linear(4, 2), torch.nn.Linear(4, 2)
    params = list(a.parameters()) + list(b.parameters())
    opt = torch.optim.SGD(params, 0.1)
    rec = Recorder(tmp_path / "run", models={"a": a, "b": b}, optimizers=[opt])
    x = torch.randn(8, 4)
    with rec.step():
        loss = (a(x) + b(x)).pow(2).mean()
        opt.zero_grad()
        rec.backward({"l": loss})
        torch.nn.utils.clip_grad_norm_(params, 0.01)  # in place, over both models' grads
        opt.step()
    rec.close()
    (logs,) = load_logdir(str(tmp_path))
    graph = logs.flowgraphs[-1][1]
    assert not [w for w in graph.warnings if "capture" in w], graph.warnings
    assert graph.state("l", "a") == graph.state("l", "b") == "updates"
