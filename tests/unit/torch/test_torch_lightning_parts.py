"""Which tensors of the dict a Lightning `training_step` returns are loss rows
(`tb_gradscope.torch._lightning.named_parts`): the scalar tensors the total is
computed from, and the total too when it reaches a parameter through none of
them. No training, no Lightning import."""

from __future__ import annotations

import torch
from torch import nn

from tb_gradscope.torch._lightning import named_parts


def _rows(parts: dict) -> list:
    """(name, id of the very tensor) per row, in order: the rows are the dict's own tensors."""
    return [(name, id(t)) for name, t in parts.items()]


def _net():
    torch.manual_seed(0)
    return nn.Linear(3, 2), torch.randn(4, 3)


def test_a_plain_total_is_the_loss():
    net, x = _net()
    total = net(x).sum()
    assert _rows(named_parts(total, None)) == _rows({"loss": total})


def test_the_dicts_parts_are_the_rows_weighted_or_not():
    net, x = _net()
    a, b = net(x)[:, 0].mean(), net(x)[:, 1].pow(2).mean()
    total = (a + 0.5 * b) / 1  # Lightning divides by accumulate_grad_batches
    out = {"loss": total, "a": a, "b": b, "acc": torch.tensor(0.5), "preds": net(x)}
    assert _rows(named_parts(total, out)) == _rows({"a": a, "b": b})


def test_a_term_the_dict_does_not_name_adds_the_total():
    net, x = _net()
    a = net(x).mean()
    total = a + 0.01 * net.weight.pow(2).sum()  # a regulariser the dict leaves out
    assert _rows(named_parts(total, {"loss": total, "a": a})) == _rows({"a": a, "loss": total})


def test_tensors_off_the_totals_graph_are_not_parts():
    net, x = _net()
    a, other = net(x).mean(), net(x).max()
    total = a * 2
    assert _rows(named_parts(total, {"loss": total, "other": other})) == _rows({"loss": total})
