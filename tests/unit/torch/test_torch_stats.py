"""The statistics kernels against element-by-element numpy: GRAD_STATS columns
per parameter with NaN, Inf, zeros and an empty parameter, counts exact and
norms to float64 precision past a float32 reduction's range (`_stats.CHUNK`
pieces), and scope roll-ups that keep a parameter's NaN in its own scopes."""

from __future__ import annotations

import numpy as np
import pytest
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
    columns = stats.GradColumns([g.unsqueeze(0) for g in grads], 1)
    (figures,) = stats.pack([columns.device_figures])
    reached = np.ones((1, len(grads)), bool)
    table = columns.table(figures, reached, stats.HostRollUp(layout))
    return table[0][[layout.index(f"p{v}") for v in range(len(grads))]]


def _grads(nonfinite: bool) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(4, 3, generator=g) for _ in range(4)] + [torch.zeros(0)]
    grads[0][grads[0].abs() < 0.5] = 0.0
    grads[3].zero_()
    if nonfinite:
        grads[1][0, 0] = float("nan")
        grads[2][1, 1], grads[2][2, 2] = float("inf"), float("-inf")
    return grads


# check_on_host: a CPU's way (finite norms: magnitudes only); False: a GPU's
# (NaN/Inf zeroed in a flat copy), which a CPU takes too when a norm is not finite.
@pytest.mark.parametrize("check_on_host", [True, False], ids=["host_checked", "device_only"])
@pytest.mark.parametrize("nonfinite", [False, True], ids=["finite", "nan_inf"])
def test_grad_stats_columns_equal_numpy_with_zeros_an_empty_parameter_and_nan_inf(
    check_on_host, nonfinite, monkeypatch
):
    monkeypatch.setattr(stats, "reads_cheaply", lambda device: check_on_host)
    grads = _grads(nonfinite)
    got = tables(grads)
    for v, grad in enumerate(grads):
        np.testing.assert_allclose(got[v], expected(grad.numpy()), rtol=1e-6, equal_nan=True)


def test_counts_are_exact_and_norms_precise_past_a_float32_reductions_range():
    n = 2**22 + 3  # a float32 sum of 0/1 squares is no longer exact in one reduction
    grad = 1.0 + 1e-3 * torch.rand(n, generator=torch.Generator().manual_seed(1))
    grad[:5] = 0.0
    grad[7] = float("nan")
    _, l2, peak, nonfinite, zero_frac = tables([grad, torch.ones(3)])[0]
    assert nonfinite == 1.0
    assert zero_frac == np.float64(5 / n)
    finite = grad[torch.isfinite(grad)].double()
    assert np.isnan(l2)
    assert peak == float(finite.max())
    clean = grad.nan_to_num(0.0)
    (_, clean_l2, *_) = tables([clean])[0]
    want = float(clean.double().square().sum().sqrt())
    assert abs(clean_l2 - want) / want < 1e-6, (clean_l2, want)  # one float32 norm: ~1e-3 off


def test_host_roll_ups_keep_a_parameters_nan_in_its_own_scopes():
    layout = build_layout(["a/x", "a/y", "b/z"])
    rollup = stats.HostRollUp(layout)
    per_var = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    sums = rollup.sum(per_var)
    for s, members in enumerate(layout.members):
        np.testing.assert_array_equal(sums[s], per_var[list(members)].sum(0))
    per_var[2, 0] = np.nan
    sums = rollup.sum(per_var)
    for s, members in enumerate(layout.members):
        assert np.isnan(sums[s, 0]) == (2 in members)
        np.testing.assert_array_equal(sums[s, 1], per_var[list(members), 1].sum())
    maxima = rollup.max(np.array([1.0, 7.0, 2.0]))
    for s, members in enumerate(layout.members):
        assert maxima[s] == max([1.0, 7.0, 2.0][v] for v in members)


@pytest.mark.parametrize(
    "dtypes",
    [(torch.bfloat16,), (torch.float32, torch.float64), (torch.float16, torch.float32)],
    ids=["bfloat16", "float32_float64", "float16_float32"],
)
def test_grad_stats_and_square_sums_take_half_and_mixed_dtypes(dtypes):
    # One grouped norm per accumulation dtype: a list with no tensor of one of
    # them must not reach `_foreach_norm` (it raises on an empty list).
    g = torch.Generator().manual_seed(2)
    grads = [torch.randn(4, 3, generator=g).to(dtypes[v % len(dtypes)]) for v in range(4)]
    got = tables(grads)
    for v, grad in enumerate(grads):
        want = expected(grad.double().numpy())
        np.testing.assert_allclose(got[v], want, rtol=1e-2 if grad.dtype.itemsize == 2 else 1e-6)
    squares = stats.SquareSums()
    squares.add(grads)
    (norms,) = stats.pack([squares.reduce()])
    want = [float(grad.double().square().sum()) for grad in grads]
    np.testing.assert_allclose(squares.fold(norms), want, rtol=1e-6)
