"""Drift sums equal the nine sums of `core.drift.SUMS` taken element by element
in float64, with the pair's sides among the recorder's parameters or not; the
sharpest columns (a hard copy, a target left alone) are exact."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from tb_gradscope.core.drift import SUMS, drift_table
from tb_gradscope.format.metadata import DRIFT_COLUMNS
from tb_gradscope.torch import _stats as stats
from tb_gradscope.torch import _torch_private as private
from tb_gradscope.torch._drift import PairDrift
from tb_gradscope.torch._pairs import pair_models, resolve


def _nets(width: int = 5):
    torch.manual_seed(0)
    online = torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.Linear(width, 2))
    target = torch.nn.Sequential(torch.nn.Linear(3, width), torch.nn.Linear(width, 2))
    return online, target


def _flat(tensors) -> np.ndarray:
    return np.concatenate([t.detach().numpy().astype(np.float64).ravel() for t in tensors])


def _reference(drift: PairDrift, t, o, tp, op, tr) -> np.ndarray:
    """[n_scopes, 9] sums in SUMS order, element by element over each scope's tensors."""
    a, b, c, e = t - tp, o - tp, o - op, t - op
    f = t - tr if tr is not None else np.zeros_like(t)
    products = np.stack([(t - o) ** 2, o * o, a * a, a * b, b * b, c * c, c * e, e * e, f * f])
    sizes = [x.numel() for x in drift.pair.target]
    ends = np.cumsum(sizes)
    per_var = [products[:, end - n : end] for end, n in zip(ends, sizes)]
    return np.array(
        [
            np.concatenate([per_var[v] for v in members], 1).sum(1)
            for members in drift.layout.members
        ]
    )


class _Recorder:
    """What the recorder does around a pair at a recorded step (`_recording`)."""

    def __init__(self, drift: PairDrift, params: list[torch.Tensor]):
        self.drift, self.params = drift, params
        self.before = [torch.empty_like(p) for p in params]

    @torch.no_grad()
    def begin(self) -> None:
        private.foreach_copy(self.before, self.params)
        self.drift.snapshot()

    @torch.no_grad()
    def end(self) -> tuple[np.ndarray, bool]:
        squares = stats.SquareSums()
        update_at = squares.add(private.foreach_sub(self.params, self.before))
        values_at = squares.add(self.params)
        planned = self.drift.plan(squares, self.before, update_at, values_at)
        (norms,) = stats.pack([squares.reduce()])
        return self.drift.sums(planned, squares.fold(norms))


def _pair(online, target, shared: bool, **how):
    models = {"online": online, "target": target}
    pair = resolve(pair_models(target, online, **how), models)
    params = [*online.parameters(), *target.parameters()] if shared else []
    drift = PairDrift(pair, {id(p) for p in online.parameters()}, {}, params)
    assert (drift.at is not None) == shared
    return pair, drift, _Recorder(drift, params)


@pytest.mark.parametrize("shared", [True, False], ids=["recorder_snapshot", "own_snapshot"])
def test_drift_sums_equal_the_element_by_element_sums_through_polyak_steps(shared):
    online, target = _nets()
    pair, drift, recorder = _pair(online, target, shared, tau=0.05)
    tr = None
    for step in range(3):
        recorder.begin()
        tp, op = _flat(pair.target), _flat(pair.online)
        with torch.no_grad():
            for p in online.parameters():
                p.add_(0.1 * torch.randn_like(p))
            for pt, po in zip(target.parameters(), online.parameters()):
                pt.lerp_(po, 0.05)
        sums, had_record = recorder.end()
        t, o = _flat(pair.target), _flat(pair.online)
        assert had_record == (step > 0)
        assert sums.shape == (len(drift.layout.scopes), len(SUMS))
        want = _reference(drift, t, o, tp, op, tr)
        # Squares to float32 per element, summed in float64; the dot products
        # (from squares) to float32 of the largest square they come from.
        np.testing.assert_allclose(sums, want, rtol=2e-6, atol=1e-7 * want.max())
        columns = drift_table(sums, True, np.zeros(len(sums)), had_record)
        tau = columns[:, DRIFT_COLUMNS.index("tau")]
        np.testing.assert_allclose(tau, 0.05, rtol=1e-4)
        tr = t


@pytest.mark.parametrize("shared", [True, False], ids=["recorder_snapshot", "own_snapshot"])
def test_a_hard_copy_and_a_target_left_alone_read_exactly(shared):
    online, target = _nets()
    _, drift, recorder = _pair(online, target, shared, every=10)
    column = {name: k for k, name in enumerate(DRIFT_COLUMNS)}
    for copy in (True, False):
        recorder.begin()
        with torch.no_grad():
            for p in online.parameters():
                p.add_(0.1 * torch.randn_like(p))
            if copy:
                target.load_state_dict(online.state_dict())
        sums, had = recorder.end()
        table = drift_table(sums, True, np.zeros(len(sums)), had)
        if copy:
            assert (table[:, column["drift"]] == 0.0).all()
            assert (table[:, column["tau"]] == 1.0).all()
        else:
            assert (sums[:, SUMS.index("ab")] == 0.0).all()
            assert (table[:, column["tau"]] == 0.0).all()
            assert (table[:, column["target_moved"]] == 0.0).all()


def test_a_large_tensor_sums_to_float64_precision_in_pieces():
    # One float32 2-norm over a million elements near 1 reads ~7e-4 off on a
    # CPU; pieces of stats.CHUNK elements summed in float64 read ~1e-7.
    online, target = _nets(width=400_000)
    _, drift, recorder = _pair(online, target, True, tau=0.5)
    with torch.no_grad():
        for p in (*online.parameters(), *target.parameters()):
            p.fill_(1.0).add_(torch.rand_like(p), alpha=1e-3)
    recorder.begin()
    sums, _ = recorder.end()
    want = float(np.square(_flat(online.parameters())).sum())
    got = sums[drift.layout.scopes.index("target"), SUMS.index("online2")]  # the root: every row
    assert abs(got - want) / want < 1e-6, (got, want)
