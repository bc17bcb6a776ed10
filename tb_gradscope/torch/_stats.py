"""The PyTorch statistics kernels: gradients and values -> per-scope tables, on the device.

Per (loss, parameter) reductions are grouped kernels (`torch._foreach_norm`
2-norms and `_foreach_max` over views of one flat copy: one launch per
reduction for all parameters and losses together), rolled up to every scope
by masked sums and maxima over the layout's membership (a parameter's NaN/Inf
stays in its own scopes); drift's sums of squares likewise
(`sums_of_squares`). Signed sums (conflict's dot products) are segment sums
by a float64 cumulative sum. Nothing
leaves the device here and nothing is read per parameter: the recorder moves
a recorded step's tables to the host once (`pack`). The few index tensors
built on the host go to the device without a wait (`to_device`: pinned
memory, non-blocking), so a recorded step never stalls on the device queue
before its one transfer.

GRAD_STATS columns as docs/FORMAT.md: grad_vars (parameters the loss's graph
reaches), l2 (NaN/Inf propagate), max_abs over finite elements, nonfinite,
zero_frac (exact zeros over the reached elements).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from tb_gradscope.scopes import ScopeLayout
from tb_gradscope.torch import _torch_private as private

# The most elements a float32 2-norm counts exactly (squared and rounded): its
# sum of 0/1 squares is exact below 2**24, and sqrt's rounding, squared, moves
# a count c by at most c * 2**-23 (< 0.5 up to 2**22); larger tensors are
# counted in float64, whose `_foreach_norm(dtype=)` copies each tensor first.
_EXACT_COUNT = 2**22


class ScopeRollUp:
    """Which parameters each scope holds, as device tensors for roll-ups."""

    def __init__(self, layout: ScopeLayout, device: torch.device):
        n_vars, n_scopes = len(layout.variable_names), len(layout.scopes)
        member = np.zeros((n_vars, n_scopes), np.float64)
        for s, members in enumerate(layout.members):
            member[list(members), s] = 1.0
        self.n_scopes = n_scopes
        self.matrix = torch.from_numpy(member).to(device)
        self.mask = self.matrix > 0

    def sum(self, per_var: torch.Tensor) -> torch.Tensor:
        """[..., n_vars, k] -> [..., n_scopes, k] (float64). A parameter's NaN/Inf
        reaches its own scopes only (a product with the membership matrix
        would spread it to every scope: 0 * NaN is NaN)."""
        spread = torch.where(self.mask.unsqueeze(-1), per_var.double().unsqueeze(-2), 0.0)
        return spread.sum(dim=-3)

    def max(self, per_var: torch.Tensor) -> torch.Tensor:
        """[..., n_vars] (>= 0) -> [..., n_scopes]: the max over each scope's parameters."""
        spread = torch.where(self.mask, per_var.double().unsqueeze(-1), 0.0)
        return spread.amax(dim=-2)


def flat(tensors: Sequence[torch.Tensor], dtype: torch.dtype | None = None) -> torch.Tensor:
    """Every tensor's values, detached, as one flat vector (one copy), cast to
    `dtype` when given (once, after the copy, when the tensors share a dtype)."""
    parts = [t.detach().reshape(-1) for t in tensors]
    if dtype is None or len({p.dtype for p in parts}) == 1:
        joined = torch.cat(parts)
        return joined if dtype is None else joined.to(dtype)
    return torch.cat([p.to(dtype) for p in parts])


def to_device(host: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A host tensor on `device`, copied without waiting for the device's queue
    (a blocking copy to a GPU waits for every kernel queued before it): from
    pinned memory, non-blocking, to a GPU; on the CPU, the tensor itself."""
    if host.device == device:
        return host
    if device.type != "cuda":  # pinned memory is CUDA's
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


def segment_sums(rows: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """[k, T] -> [k, len(sizes)]: sums over consecutive segments of `sizes`
    elements, by a float64 cumulative sum (deterministic on every device)."""
    ends = to_device(torch.as_tensor(np.cumsum(sizes) - 1), rows.device)
    total = torch.cumsum(rows.double(), dim=1).index_select(1, ends)
    return torch.diff(total, dim=1, prepend=torch.zeros_like(total[:, :1]))


def sums_of_squares(rows: Sequence[torch.Tensor], sizes: Sequence[int]) -> torch.Tensor:
    """k flat vectors of one layout -> [k, len(sizes)]: each segment's sum of
    squares, by one grouped norm over views of all k (no copy, nothing read)."""
    views = [view for row in rows for view in _views1(row, sizes)]
    return torch.stack(private.foreach_norm(views, 2)).double().square().reshape(len(rows), -1)


def grad_tables(
    grads: Sequence[torch.Tensor | None],
    reached: torch.Tensor,
    rollup: ScopeRollUp,
    n_losses: int,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(GRAD_STATS [L, n_scopes, 5] float64, the flat gradients [L, T] or None).

    `grads[v]` is [L, *shape] (every loss's gradient of parameter v, batched)
    or None when no loss reaches it; `reached` [L, n_vars] is 1.0 where loss l's
    graph reaches parameter v. Three grouped reductions over views of one flat
    copy and of three rows made from it give every per-parameter number: the
    sum of squares (L2), the largest finite |g| (a grouped max of |g| with
    NaN/Inf zeroed), the non-finite count (non-zeros of all minus non-zeros of
    the finite part, each a sum of 0/1 signs) and the zeros (elements minus
    non-zeros)."""
    n_vars = len(grads)
    present = [v for v, g in enumerate(grads) if g is not None]
    device = reached.device
    flat_grads = None
    if not present:
        per_var = torch.zeros(n_losses, n_vars, 5, dtype=torch.float64, device=device)
    else:
        dtype = _float_dtype([grads[v] for v in present])
        flat_grads = torch.cat([grads[v].reshape(n_losses, -1) for v in present], 1).to(dtype)
        sizes = [grads[v][0].numel() for v in present]
        magnitude = flat_grads.abs()
        # Rows: |g| with NaN/Inf zeroed; 1 where g != 0 (NaN/Inf included); 1 where
        # its finite part != 0. On a CPU only the 2-norm of `_foreach_norm` is fast
        # (its 0-, 1- and inf-norms loop with a slow reduction): the 0/1 rows are
        # counted by 2-norms, squared and rounded (exact: `_EXACT_COUNT`), the max
        # by a grouped max.
        parts = magnitude.new_empty(3, *magnitude.shape)
        torch.nan_to_num(magnitude, nan=0.0, posinf=0.0, out=parts[0])
        torch.nan_to_num(magnitude, nan=1.0, out=parts[1]).sign_()  # sign(NaN) is 0 on a CPU
        torch.sign(parts[0], out=parts[2])
        l2 = torch.stack(private.foreach_norm(_views(flat_grads, sizes), 2)).double().square()
        max_abs = torch.stack(private.foreach_max(_views(parts[0], sizes))).double()
        ones = _views(parts[1:].flatten(0, 1), sizes)
        count_dtype = None if max(sizes) <= _EXACT_COUNT else torch.float64
        nonzero, finite_nonzero = (
            torch.stack(private.foreach_norm(ones, 2, count_dtype))
            .double()
            .square()
            .round()
            .reshape(2, n_losses, len(present))
            .unbind(0)
        )
        l2, max_abs = l2.reshape(n_losses, -1), max_abs.reshape(n_losses, -1)
        counts = to_device(torch.as_tensor(sizes, dtype=torch.float64), device).expand_as(l2)
        columns = torch.stack(
            [l2, max_abs, nonzero - finite_nonzero, counts - nonzero, counts], dim=-1
        )
        if len(present) == n_vars:
            per_var = columns
        else:
            per_var = columns.new_zeros(n_losses, n_vars, 5)
            per_var[:, to_device(torch.as_tensor(present), device)] = columns
    per_var = per_var * reached.unsqueeze(-1)
    # Columns rolled up: reached, sum of squares, (max), non-finite, zeros, elements.
    sums = rollup.sum(torch.cat([reached.unsqueeze(-1), per_var], dim=-1))
    zero_frac = sums[..., 4] / sums[..., 5].clamp(min=1)  # no elements: no zeros, 0 / 1
    table = torch.stack(
        [sums[..., 0], sums[..., 1].sqrt(), rollup.max(per_var[..., 1]), sums[..., 3], zero_frac],
        dim=-1,
    )
    return table, flat_grads


def gram(flat_grads: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """[L, T] -> [L, L, n_vars]: per parameter, the dot products of every two losses' gradients."""
    n = flat_grads.shape[0]
    rows = (flat_grads.unsqueeze(1) * flat_grads.unsqueeze(0)).reshape(n * n, -1)
    return segment_sums(rows, sizes).reshape(n, n, len(sizes))


def update_table(
    before: torch.Tensor, after: torch.Tensor, sizes: Sequence[int], rollup: ScopeRollUp
) -> torch.Tensor:
    """UPDATE_STATS [n_scopes, 2]: ||after - before||, ||after|| (flat vectors of one
    layout, in the parameters' own dtype: a difference of close values is exact)."""
    norms = private.foreach_norm(_views1(after - before, sizes) + _views1(after, sizes), 2)
    per = torch.stack(norms).double().reshape(2, len(sizes)).T
    return rollup.sum(per.square()).sqrt()


def _views(rows: torch.Tensor, sizes: Sequence[int]) -> list[torch.Tensor]:
    """Views of [L, T] as L * len(sizes) pieces, loss-major (no copy)."""
    pieces = [torch.split(row, list(sizes)) for row in rows]
    return [piece for row in pieces for piece in row]


def _views1(flat_values: torch.Tensor, sizes: Sequence[int]) -> list[torch.Tensor]:
    return list(torch.split(flat_values, list(sizes)))


def _float_dtype(tensors: Sequence[torch.Tensor]) -> torch.dtype:
    """float64 if any tensor is, else float32 (half types summed in float32)."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def pack(tensors: Sequence[torch.Tensor]) -> list[np.ndarray]:
    """Many device tensors -> numpy arrays of the same shapes, in one host transfer."""
    if not tensors:
        return []
    flat_all = torch.cat([t.detach().reshape(-1).double() for t in tensors]).cpu().numpy()
    out, at = [], 0
    for t in tensors:
        out.append(flat_all[at : at + t.numel()].reshape(tuple(t.shape)))
        at += t.numel()
    return out
