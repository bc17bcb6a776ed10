"""The statistics kernels against element-by-element numpy: GRAD_STATS columns
per parameter with NaN, Inf, zeros and an empty parameter, and counts exact
past the float32 2-norm's exact range (`_stats._EXACT_COUNT`)."""

from __future__ import annotations

import numpy as np
import torch

from tb_gradscope.scopes import build_layout
from tb_gradscope.torch import _stats as stats


def expected(grad: np.ndarray) -> list[float]:
    """[reached, l2, max finite |g|, non-finite, zero_frac] of one parameter."""
    finite = np.isfinite(grad)
    with np.errstate(over="ignore", invalid="ignore"):
        l2 = float(np.sqrt(np.sum(grad.astype(np.float64) ** 2)))
    peak = float(np.abs(grad[finite]).max()) if finite.any() else 0.0
    zero_frac = float(np.mean(grad == 0)) if grad.size else 0.0
    return [1.0, l2, peak, float((~finite).sum()), zero_frac]


def tables(grads: list[torch.Tensor]) -> np.ndarray:
    """GRAD_STATS of one loss reaching every parameter, one scope per parameter."""
    layout = build_layout([f"p{v}/w" for v in range(len(grads))])
    rollup = stats.ScopeRollUp(layout, torch.device("cpu"))
    reached = torch.ones(1, len(grads), dtype=torch.float64)
    table, _ = stats.grad_tables([g.unsqueeze(0) for g in grads], reached, rollup, 1)
    return table[0].numpy()[[layout.index(f"p{v}") for v in range(len(grads))]]


def test_grad_stats_columns_equal_numpy_with_nan_inf_zeros_and_an_empty_parameter():
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(4, 3, generator=g) for _ in range(4)] + [torch.zeros(0)]
    grads[0][grads[0].abs() < 0.5] = 0.0
    grads[1][0, 0] = float("nan")
    grads[2][1, 1], grads[2][2, 2] = float("inf"), float("-inf")
    grads[3].zero_()
    got = tables(grads)
    for v, grad in enumerate(grads):
        np.testing.assert_allclose(got[v], expected(grad.numpy()), rtol=1e-6, equal_nan=True)


def test_counts_are_exact_past_the_float32_norms_exact_range():
    n = stats._EXACT_COUNT + 3
    grad = torch.ones(n)
    grad[:5] = 0.0
    grad[7] = float("nan")
    _, _, _, nonfinite, zero_frac = tables([grad, torch.ones(3)])[0]
    assert nonfinite == 1.0
    assert zero_frac == np.float64(5 / n)
