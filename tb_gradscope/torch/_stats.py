"""The PyTorch statistics kernels: per-tensor reductions on the device, scope tables on the host.

A recorded step reduces each parameter's gradient, update and drift to a few
numbers with grouped kernels (`torch._foreach_norm` 2-norms and
`_foreach_max`, one launch per reduction for all tensors together), moves
them to the host in one transfer (`pack`), and rolls them up to scopes there
(`HostRollUp`: numpy over a few numbers per parameter costs microseconds,
where every device op costs a dispatch). Nothing is read per parameter.

Tensors are reduced in flat pieces of at most `CHUNK` elements (`Pieces`,
views, no copy), summed per tensor in float64 on the host: a float32 2-norm
accumulates in float32 on a CPU (a million elements near 1 read 7e-4 off), a
piece's is good to ~3e-7, and a piece's count of 0/1 elements is exact.

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

CHUNK = 2**16
_HALF = frozenset({torch.float16, torch.bfloat16})


class HostRollUp:
    """Per-parameter figures (numpy) -> per-scope figures, by the layout's membership."""

    def __init__(self, layout: ScopeLayout):
        member = np.zeros((len(layout.variable_names), len(layout.scopes)), np.float64)
        for s, members in enumerate(layout.members):
            member[list(members), s] = 1.0
        self.n_scopes = len(layout.scopes)
        self._member_t = np.ascontiguousarray(member.T)
        self._mask = member > 0

    def sum(self, per_var: np.ndarray) -> np.ndarray:
        """[..., n_vars, k] -> [..., n_scopes, k] (float64). A parameter's NaN/Inf
        reaches its own scopes only (a product with the membership matrix would
        spread it to every scope: 0 * NaN is NaN)."""
        per_var = np.asarray(per_var, np.float64)
        if np.isfinite(per_var).all():
            return self._member_t @ per_var
        spread = np.where(self._mask[..., None], per_var[..., :, None, :], 0.0)
        return spread.sum(axis=-3)

    def max(self, per_var: np.ndarray) -> np.ndarray:
        """[..., n_vars] (>= 0) -> [..., n_scopes]: the max over each scope's parameters."""
        spread = np.where(self._mask, np.asarray(per_var, np.float64)[..., None], 0.0)
        return spread.max(axis=-2, initial=0.0)


class Pieces:
    """Tensors in pieces of at most CHUNK elements (a smaller tensor is one
    piece, as it is; a larger one, flat views), and the host folds of
    per-piece figures back to per-tensor ones."""

    def __init__(self, tensors: Sequence[torch.Tensor]):
        self.views: list[torch.Tensor] = []
        starts = []
        for t in tensors:
            starts.append(len(self.views))
            if t.numel() <= CHUNK:  # a reduction takes any shape: no view to make
                self.views.append(t)
            else:
                self.views.extend(torch.split(t.reshape(-1), CHUNK))
        self._starts = np.asarray(starts, np.intp)
        self._whole = len(starts) == len(self.views)  # every tensor in one piece

    def sums(self, per_piece: np.ndarray) -> np.ndarray:
        """[..., n_pieces] -> [..., n_tensors]: each tensor's sum (float64)."""
        per_piece = np.asarray(per_piece, np.float64)
        if self._whole:
            return per_piece
        return np.add.reduceat(per_piece, self._starts, axis=-1)

    def maxima(self, per_piece: np.ndarray) -> np.ndarray:
        """[..., n_pieces] -> [..., n_tensors]: each tensor's max."""
        per_piece = np.asarray(per_piece, np.float64)
        if self._whole:
            return per_piece
        return np.maximum.reduceat(per_piece, self._starts, axis=-1)


class SquareSums:
    """Sums of squares of many tensors, in one grouped 2-norm over their pieces:
    `add` tensors (their positions in the result), `reduce()` on the device,
    then `fold` the moved per-piece norms to per-tensor sums on the host."""

    def __init__(self):
        self._tensors: list[torch.Tensor] = []
        self._pieces: Pieces | None = None

    def add(self, tensors: Sequence[torch.Tensor]) -> list[int]:
        """Adds tensors (under `torch.no_grad()`); returns their positions."""
        at = len(self._tensors)
        self._tensors.extend(tensors)
        return list(range(at, len(self._tensors)))

    def reduce(self) -> torch.Tensor:
        """[n_pieces] per-piece 2-norms (half types accumulated in float32)."""
        self._pieces = Pieces(self._tensors)
        return piece_norms(self._pieces.views)

    def fold(self, norms: np.ndarray) -> np.ndarray:
        """The moved `reduce()` -> [n_tensors] float64 sums of squares."""
        assert self._pieces is not None, "reduce() first"
        return self._pieces.sums(np.square(np.asarray(norms, np.float64)))


def piece_norms(views: Sequence[torch.Tensor]) -> torch.Tensor:
    """[len(views)] 2-norms (float64), in one grouped kernel per accumulation
    dtype (float32 for half types, whose own norm keeps three digits)."""
    if not views:
        return torch.zeros(0, dtype=torch.float64)
    dtypes = {v.dtype for v in views}
    if len(dtypes) == 1 and not dtypes & _HALF:
        return torch.stack(private.foreach_norm(views, 2)).double()
    norms: list[torch.Tensor | None] = [None] * len(views)
    half = [k for k, v in enumerate(views) if v.dtype in _HALF]
    rest = [k for k, v in enumerate(views) if v.dtype not in _HALF]
    for ks, dtype in ((half, torch.float32), (rest, None)):
        for k, n in zip(ks, private.foreach_norm([views[k] for k in ks], 2, dtype)):
            norms[k] = n.double()
    return torch.stack(norms)


def reads_cheaply(device: torch.device) -> bool:
    """Whether reading a value of `device` on the host costs nothing: a CPU's
    (no queue to wait for); a GPU's waits for every kernel queued before it."""
    return device.type == "cpu"


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


def flat_gradients(
    grads: Sequence[torch.Tensor | None], n_losses: int
) -> tuple[torch.Tensor | None, list[int]]:
    """([L, T] every present gradient flattened, loss by loss, or None; which
    parameters are present). `grads[v]` is [L, *shape] (every loss's gradient
    of parameter v, batched) or None when no loss reaches it."""
    present = [v for v, g in enumerate(grads) if g is not None]
    if not present:
        return None, present
    dtype = _float_dtype([grads[v] for v in present])
    return torch.cat([grads[v].reshape(n_losses, -1) for v in present], 1).to(dtype), present


class GradColumns:
    """One backward's per-parameter GRAD_STATS figures for L losses, on the device.

    `grads[v]` is [L, *shape] (every loss's gradient of parameter v, batched)
    or None when no loss reaches it. Per (loss, parameter) and piece: the
    2-norm, the largest finite |g|, the non-zeros (NaN/Inf included) and the
    finite non-zeros, each count a 2-norm of 0/1 signs squared (exact per
    piece). When every norm is finite, so is every element: then the max and
    the count come from the magnitudes in two grouped kernels. A CPU tells at
    once (reading a CPU tensor waits for nothing); on a GPU, where that read
    would wait for the queue, and on a CPU with NaN/Inf, the finite part is
    taken from a flat copy with NaN/Inf zeroed. `table` turns the moved
    figures into the [L, n_scopes, 5] table on the host."""

    def __init__(self, grads: Sequence[torch.Tensor | None], n_losses: int):
        self.present = [v for v, g in enumerate(grads) if g is not None]
        self.sizes = [grads[v][0].numel() for v in self.present]
        self.device_figures: torch.Tensor | None = None
        if not self.present:
            return
        rows = [grads[v][k] for k in range(n_losses) for v in self.present]
        self._pieces = Pieces(rows)
        views = self._pieces.views
        norms = piece_norms(views)
        if reads_cheaply(views[0].device) and bool(norms.isfinite().all()):
            magnitude = private.foreach_abs(views)
            maxima = torch.stack(private.foreach_max(magnitude)).double()
            private.foreach_sign_(magnitude)
            nonzero = piece_norms(magnitude)
            self.device_figures = torch.cat([norms, maxima, nonzero, nonzero])
            return
        flat_grads = torch.cat([r.reshape(-1) for r in rows]).to(_float_dtype(rows))
        # Rows: |g| with NaN/Inf zeroed; 1 where g != 0 (NaN/Inf included); 1 where
        # its finite part != 0. On a CPU only the 2-norm of `_foreach_norm` is fast
        # (its 0-, 1- and inf-norms loop with a slow reduction): the 0/1 rows are
        # counted by 2-norms, the max by a grouped max.
        magnitude = flat_grads.abs()
        parts = magnitude.new_empty(3, *magnitude.shape)
        torch.nan_to_num(magnitude, nan=0.0, posinf=0.0, out=parts[0])
        torch.nan_to_num(magnitude, nan=1.0, out=parts[1]).sign_()  # sign(NaN) is 0 on a CPU
        torch.sign(parts[0], out=parts[2])
        sizes = [r.numel() for r in rows]
        finite = Pieces(torch.split(parts[0], sizes)).views
        ones = Pieces(torch.split(parts[1:].flatten(), sizes + sizes)).views
        maxima = torch.stack(private.foreach_max(finite)).double()
        self.device_figures = torch.cat([norms, maxima, piece_norms(ones)])

    def table(
        self, figures: np.ndarray | None, reached: np.ndarray, rollup: HostRollUp
    ) -> np.ndarray:
        """The moved `device_figures` -> GRAD_STATS [L, n_scopes, 5] float64.
        `reached` [L, n_vars] is True where loss l's graph reaches parameter v."""
        n_losses, n_vars = reached.shape
        # Per parameter: reached, sum of squares, max, non-finite, zeros, elements.
        per_var = np.zeros((n_losses, n_vars, 6))
        per_var[..., 0] = reached
        if figures is not None:
            n_pieces = len(self._pieces.views)
            figures = np.asarray(figures, np.float64)
            norms, maxima = figures[:n_pieces], figures[n_pieces : 2 * n_pieces]
            # Each piece's count is exact once rounded (< CHUNK ones, sqrt's rounding squared).
            ones = np.rint(np.square(figures[2 * n_pieces :].reshape(2, -1)))
            nonzero, finite_nonzero = self._pieces.sums(ones).reshape(2, n_losses, -1)
            sizes = np.asarray(self.sizes, np.float64)
            columns = np.empty((n_losses, len(self.present), 5))
            columns[..., 0] = self._pieces.sums(np.square(norms)).reshape(n_losses, -1)
            columns[..., 1] = self._pieces.maxima(maxima).reshape(n_losses, -1)
            columns[..., 2] = nonzero - finite_nonzero
            columns[..., 3] = sizes - nonzero
            columns[..., 4] = sizes
            per_var[:, self.present, 1:] = columns
            if not reached.all():
                per_var[~reached, 1:] = 0.0  # a loss's row holds what its graph reaches
        sums = rollup.sum(per_var)
        table = np.empty((n_losses, rollup.n_scopes, 5))
        table[..., 0] = sums[..., 0]
        with np.errstate(invalid="ignore"):
            table[..., 1] = np.sqrt(sums[..., 1])
        table[..., 2] = rollup.max(per_var[..., 2])
        table[..., 3] = sums[..., 3]
        table[..., 4] = sums[..., 4] / np.maximum(sums[..., 5], 1.0)  # no elements: 0 / 1
        return table


def gram(flat_grads: torch.Tensor, sizes: Sequence[int]) -> torch.Tensor:
    """[L, T] -> [L, L, n_vars]: per parameter, the dot products of every two losses' gradients."""
    n = flat_grads.shape[0]
    rows = (flat_grads.unsqueeze(1) * flat_grads.unsqueeze(0)).reshape(n * n, -1)
    return segment_sums(rows, sizes).reshape(n, n, len(sizes))


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
