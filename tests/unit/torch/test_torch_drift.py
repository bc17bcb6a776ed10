"""Drift sums on the device equal the nine sums of `core.drift.SUMS` taken
element by element in float64, from the recorder's flat copy or from the pair's
own tensors alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tb_gradscope.core.drift import SUMS
from tb_gradscope.torch._drift import PairDrift
from tb_gradscope.torch._pairs import pair_models, resolve
from tb_gradscope.torch._stats import flat


def _nets():
    torch.manual_seed(0)
    online = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
    target = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Linear(5, 2))
    return online, target


def _reference(drift: PairDrift, t, o, tp, op, tr) -> np.ndarray:
    """[n_scopes, 9] sums in SUMS order, element by element over each scope's tensors."""
    t, o, tp, op = (x.numpy().astype(np.float64) for x in (t, o, tp, op))
    a, b, c, e = t - tp, o - tp, o - op, t - op
    f = t - tr.numpy() if tr is not None else np.zeros_like(t)
    products = np.stack([(t - o) ** 2, o * o, a * a, a * b, b * b, c * c, c * e, e * e, f * f])
    ends = np.cumsum(drift.sizes)
    per_var = [products[:, end - n : end] for end, n in zip(ends, drift.sizes)]
    return np.array(
        [
            np.concatenate([per_var[v] for v in members], 1).sum(1)
            for members in drift.layout.members
        ]
    )


@pytest.mark.parametrize("one_row", [True, False], ids=["row_by_row", "grouped"])
@pytest.mark.parametrize("from_flat", [True, False], ids=["recorder_flat", "own_copy"])
def test_drift_sums_equal_the_element_by_element_sums_through_polyak_steps(from_flat, one_row):
    # row_by_row: the CPU's way (each difference squared as it is made); grouped: the GPU's.
    online, target = _nets()
    models = {"online": online, "target": target}
    pair = resolve(pair_models(target, online, tau=0.05), models)
    params = [*online.parameters(), *target.parameters()] if from_flat else []
    drift = PairDrift(pair, {id(p) for p in online.parameters()}, {}, params)
    assert drift.one_row  # on the CPU
    drift.one_row = one_row
    tr = None
    for step in range(3):
        before = flat(params) if from_flat else None
        tp, op = flat(pair.target).clone(), flat(pair.online).clone()
        drift.snapshot(before)
        with torch.no_grad():
            for p in online.parameters():
                p.add_(0.1 * torch.randn_like(p))
            for pt, po in zip(target.parameters(), online.parameters()):
                pt.lerp_(po, 0.05)
        sums, had_record = drift.sums(flat(params) if from_flat else None)
        t, o = flat(pair.target), flat(pair.online)
        assert had_record == (step > 0)
        assert sums.shape == (len(drift.layout.scopes), len(SUMS))
        np.testing.assert_allclose(
            sums.numpy(), _reference(drift, t, o, tp, op, tr), rtol=1e-12, atol=1e-15
        )
        tr = t.double().clone()
