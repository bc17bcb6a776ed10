"""Per-path cuts in PyTorch FlowGraphs: a `.detach()` of what a scope put out,
beside a path by which the loss's gradient still reaches that scope, is a
blocked edge with its line and the open path (SimSiam); a cut of every path is
a plain blocked edge, with no open path."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tb_gradscope import format as fmt
from tb_gradscope.format.flowgraph import CAUSE_STOP_GRADIENT
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.torch import Recorder
from tests.support import torch_loops


def _simsiam(tmp_path, detach: bool):
    torch.manual_seed(0)
    encoder, predictor = torch_loops.mlp(3, 4), torch_loops.mlp(4, 4)
    opt = torch.optim.SGD([*encoder.parameters(), *predictor.parameters()], lr=0.1)
    rec = Recorder(
        tmp_path,
        every_n_steps=1,
        models={"encoder": encoder, "predictor": predictor},
        optimizers=[opt],
    )
    x = torch.randn(5, 3)
    z = encoder(x)
    target = z.detach() if detach else z
    loss = -F.cosine_similarity(predictor(z), target).mean()
    opt.zero_grad()
    rec.backward({"simsiam": loss})
    opt.step()
    rec.close()
    (run,) = load_logdir(str(tmp_path))
    return run.flowgraph


def test_a_detach_beside_an_open_path_is_a_per_path_cut_with_its_open_path(tmp_path):
    graph = _simsiam(tmp_path, detach=True)
    assert graph.path_cuts
    assert graph.cells["simsiam"]["encoder"] == fmt.UPDATES
    (edge,) = graph.blocked_edges
    assert edge.op_name == "Tensor.detach" and edge.cause == CAUSE_STOP_GRADIENT
    assert edge.source.file.endswith("test_torch_path_cuts.py")
    assert edge.open_path[0] == edge.producer_scope and edge.producer_scope.startswith("encoder")
    assert edge.open_path[-1] == "loss:simsiam"
    assert any(node.startswith("predictor") for node in edge.open_path)


def test_without_the_detach_there_is_no_cut(tmp_path):
    graph = _simsiam(tmp_path, detach=False)
    assert graph.path_cuts and graph.blocked_edges == []
