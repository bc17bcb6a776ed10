"""A cut made with gradients off names the line that switched them off: the
`with torch.no_grad():` (or `inference_mode()`, `set_grad_enabled(False)`)
block around the call, or a `@torch.no_grad()` decorator, in the innermost
user frame inside one; an op's own line only where no such region is written."""

from __future__ import annotations

import sys

import torch
from torch import nn

from tb_gradscope.torch._grad_mode_source import grad_off_source


def _line() -> int:
    return sys._getframe(1).f_lineno


class _Net(nn.Module):
    def forward(self, x):
        return grad_off_source()  # asked from inside a module's forward, as the capture is


def test_a_with_no_grad_block_names_its_with_line_even_from_inside_a_modules_forward():
    with_line = _line() + 1
    with torch.no_grad():
        found = _Net()(torch.zeros(1))
    assert (
        found is not None
        and found.line == with_line
        and found.file.endswith(__name__.split(".")[-1] + ".py")
    )


def test_the_innermost_enclosing_region_wins_and_set_grad_enabled_false_counts():
    with torch.no_grad():
        inner = _line() + 1
        with torch.set_grad_enabled(False):
            found = grad_off_source()
    assert found.line == inner


def test_inference_mode_counts_and_inference_mode_false_and_enable_grad_do_not():
    outer = _line() + 1
    with torch.inference_mode():
        with torch.inference_mode(False), torch.enable_grad():
            found = grad_off_source()
    assert found.line == outer


def test_a_no_grad_decorator_names_the_decorator_line():
    decorator = _line() + 2

    @torch.no_grad()
    def target_values():
        return grad_off_source()

    assert target_values().line == decorator


def test_no_region_written_gives_none_so_the_op_line_is_used():
    previous = torch.is_grad_enabled()
    torch.set_grad_enabled(False)  # switched off by a call, not a region
    try:
        assert grad_off_source() is None
    finally:
        torch.set_grad_enabled(previous)
