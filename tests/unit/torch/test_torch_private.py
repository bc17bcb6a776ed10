"""Every name of `tb_gradscope/torch/_torch_private.py`, touched once against the installed torch.

One test per name (`test_<name>`, held by the last test), so an upgrade that
moves a private symbol fails here by name before any recorder test does.
"""

from __future__ import annotations

import ast
import pathlib
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.overrides import TorchFunctionMode

from tb_gradscope.torch import _torch_private as private


def test_leave_function_mode():
    first, second, third = TorchFunctionMode(), TorchFunctionMode(), TorchFunctionMode()
    stack = torch.overrides._get_current_function_mode_stack
    first.__enter__()
    with second, third:
        assert private.leave_function_mode(first)
        assert stack() == [second, third]  # the modes entered later stay, in order
        assert not private.leave_function_mode(first)
    assert stack() == []


def test_foreach_norm():
    xs = [torch.tensor([0.0, 3.0, -4.0]), torch.tensor([[0.0, 0.0], [2.0, 0.0]])]
    assert [float(n) for n in private.foreach_norm(xs, 2)] == [5.0, 2.0]
    assert [float(n) for n in private.foreach_norm(xs, 0)] == [2.0, 1.0]  # non-zero elements
    assert [float(n) for n in private.foreach_norm(xs, float("inf"))] == [4.0, 2.0]
    assert [float(n) for n in private.foreach_norm(xs, 1)] == [7.0, 2.0]
    assert private.foreach_norm([], 2) == ()  # torch's raises on an empty list


def test_foreach_max():
    xs = [torch.tensor([0.0, 3.0, -4.0]), torch.zeros(0), torch.tensor([[-1.0], [-2.0]])]
    assert [float(m) for m in private.foreach_max(xs)] == [3.0, 0.0, -1.0]  # 0 for the empty one
    assert private.foreach_max([]) == ()


def test_foreach_sub():
    a = [torch.tensor([3.0, 1.0]), torch.tensor([[2.0]], dtype=torch.float64)]
    b = [torch.tensor([1.0, 1.0]), torch.tensor([[5.0]], dtype=torch.float64)]
    diffs = private.foreach_sub(a, b)
    assert [d.tolist() for d in diffs] == [[2.0, 0.0], [[-3.0]]]
    assert [d.dtype for d in diffs] == [torch.float32, torch.float64]
    assert a[0].tolist() == [3.0, 1.0]  # new tensors: the operands are left as they were
    assert private.foreach_sub([], []) == []


def test_foreach_abs():
    xs = [torch.tensor([-2.0, 0.0, float("nan")]), torch.zeros(0)]
    magnitudes = private.foreach_abs(xs)
    assert magnitudes[0][:2].tolist() == [2.0, 0.0] and magnitudes[0][2].isnan()
    assert magnitudes[1].numel() == 0
    assert xs[0][0] == -2.0  # new tensors
    assert private.foreach_abs([]) == []


def test_foreach_sign_():
    xs = [torch.tensor([-2.0, 0.0, 3.5]), torch.tensor([[0.25]], dtype=torch.float64)]
    private.foreach_sign_(xs)
    assert [x.tolist() for x in xs] == [[-1.0, 0.0, 1.0], [[1.0]]]
    private.foreach_sign_([])


def test_foreach_copy():
    destinations = [torch.zeros(2), torch.zeros(1, 1)]
    sources = [torch.tensor([1.0, 2.0]), torch.tensor([[3.0]])]
    private.foreach_copy(destinations, sources)
    assert [d.tolist() for d in destinations] == [[1.0, 2.0], [[3.0]]]
    sources[0].add_(1.0)
    assert destinations[0].tolist() == [1.0, 2.0]  # copies, not views
    private.foreach_copy([], [])  # nothing to copy


def test_version():
    grad = torch.zeros(3)
    before = private.version(grad)
    grad.add_(1.0)  # an in-place change (a backward accumulating, zero_grad(set_to_none=False))
    assert private.version(grad) == before + 1
    assert private.version(grad + 0) == 0  # a new tensor starts its own count


def test_ddp_sink_reduces(tmp_path):
    # A one-rank gloo group: DDP's sink is on the outputs of a static graph's
    # first iteration and of find_unused_parameters; only the first reduces.
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        x = torch.randn(2, 3)
        static = DistributedDataParallel(torch.nn.Linear(3, 1), static_graph=True)
        unused = DistributedDataParallel(torch.nn.Linear(3, 1), find_unused_parameters=True)
        first, other = static(x), unused(x)
        assert type(first.grad_fn).__name__ == type(other.grad_fn).__name__ == "_DDPSinkBackward"
        assert private.ddp_sink_reduces(first.grad_fn)
        assert not private.ddp_sink_reduces(other.grad_fn)
        assert not private.ddp_sink_reduces((first * 2).grad_fn)
        first.sum().backward()  # the first iteration's delayed all-reduce runs here
        assert static(x).grad_fn is not None and not private.ddp_sink_reduces(static(x).grad_fn)
    finally:
        dist.destroy_process_group()


def test_load_compiler():
    private.load_compiler()
    assert "torch._dynamo" in sys.modules


def test_every_name_of_the_module_has_its_test():
    tree = ast.parse(pathlib.Path(private.__file__).read_text())
    public = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    public = {name for name in public if not name.startswith("_")}
    assert public == set(private.__all__), str(public ^ set(private.__all__))
    missing = [name for name in private.__all__ if f"test_{name}" not in globals()]
    assert missing == [], f"no test for: {missing}"
