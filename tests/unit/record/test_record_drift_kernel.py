"""The drift kernel: per-variable sums from values laid out in rows, and when a
`Recorder.function` variant needs no in-graph gate for drift."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.record import _drift as drift

SHAPES = [(0,), (1,), (31,), (32,), (33,), (4, 25), (3, 4, 5)]


def _sides(dtype_target, dtype_online, seed=0):
    rng = np.random.default_rng(seed)
    online = [tf.Variable(rng.normal(size=s).astype(dtype_online)) for s in SHAPES]
    target = [tf.Variable(rng.normal(size=s).astype(dtype_target)) for s in SHAPES]
    return target, online


def _numpy_sums(t, o, tp, op):
    t, o, tp, op = (np.asarray(x, np.float64) for x in (t, o, tp, op))
    d, a, b, c, e = t - o, t - tp, o - tp, o - op, t - op
    return np.array(
        [np.sum(x * y) for x, y in ((d, d), (o, o), (a, a), (a, b), (b, b), (c, c), (c, e), (e, e))]
    )


@pytest.mark.parametrize(
    "dtypes", [("float32", "float32"), ("float16", "float32")], ids=["float32", "mixed"]
)
def test_row_layout_sums_equal_numpy_per_variable(dtypes):
    target, online = _sides(*dtypes)
    previous_target, previous_online = _sides(*dtypes, seed=1)
    rows = drift.RowLayout.of(target)
    dtype = drift.flat_dtype(target + online)
    now = drift.sides_now(target, online, rows, dtype)
    before = drift.sides_now(previous_target, previous_online, rows, dtype)
    assert now.shape == [2 * rows.length] and rows.length % drift.CHUNK == 0
    got = drift.variable_sums(now, before, rows).numpy()
    assert got.shape == (len(SHAPES), 8)
    for i in range(len(SHAPES)):
        want = _numpy_sums(
            *(
                side[i].numpy().astype(np.float64)
                for side in (target, online, previous_target, previous_online)
            )
        )
        np.testing.assert_allclose(
            got[i], want, rtol=1e-12, atol=1e-12, err_msg=f"variable of shape {SHAPES[i]}"
        )


def test_every_variable_starts_a_row_and_an_empty_one_still_has_one():
    rows = drift.RowLayout((0, 1, 32, 33))
    assert list(rows.rows) == [1, 1, 1, 2]
    assert list(rows.row_ids()) == [0, 1, 2, 3, 3]
    assert rows.length == 5 * drift.CHUNK


def test_pad_puts_a_flat_side_where_sides_now_puts_it():
    target, online = _sides("float32", "float32")
    rows = drift.RowLayout.of(target)
    padded = rows.pad(drift.flatten(target))
    np.testing.assert_array_equal(
        padded.numpy(), drift.sides_now(target, online, rows, tf.float32).numpy()[: rows.length]
    )


def _numpy_table(sums, have_previous, counts, have_recorded):
    """The DRIFT columns as docs/FORMAT.md defines them, column by column."""
    s = np.asarray(sums, np.float64)

    def ratio(num, den):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)

    distance, online_norm = np.sqrt(s[:, 0]), np.sqrt(s[:, 1])
    columns = {
        "distance": distance,
        "online_norm": online_norm,
        "target_step": np.sqrt(s[:, 2]),
        "gap": np.sqrt(s[:, 4]),
        "online_step": np.sqrt(s[:, 5]),
        "gap_reverse": np.sqrt(s[:, 7]),
        "drift": ratio(distance, online_norm),
        "tau": ratio(s[:, 3], s[:, 4]),
        "tau_reverse": ratio(s[:, 6], s[:, 7]),
        "optimizer_vars": np.asarray(counts, np.float64),
        "target_moved": np.sqrt(s[:, 8]) if have_recorded else np.full(len(s), np.nan),
    }
    if not have_previous:
        for name in ("target_step", "tau", "online_step", "gap", "tau_reverse", "gap_reverse"):
            columns[name] = np.full(len(s), np.nan)
    return np.stack([columns[c] for c in drift.DRIFT_COLUMNS], axis=1).astype(np.float32)


@pytest.mark.parametrize("have_previous", [True, False])
@pytest.mark.parametrize("have_recorded", [True, False, None], ids=["kept", "first", "no_copy"])
def test_drift_table_is_each_column_as_defined(have_previous, have_recorded):
    rng = np.random.default_rng(7)
    sums = np.abs(rng.normal(size=(6, 9))) * 10.0 ** rng.integers(-12, 12, size=(6, 9))
    sums[:, [3, 6]] *= np.sign(rng.normal(size=(6, 2)))  # the inner products may be < 0
    sums[0] = 0.0  # an unmoved scope: the ratios have no denominator
    sums[1, 4] = np.nan  # a non-finite value reaches the sums
    sums[2, 1] = np.inf
    counts = np.array([0, 1, 2, 0, 3, 1], np.float64)
    given = sums if have_recorded is not None else sums[:, :8]
    extra = () if have_recorded is None else (tf.constant(have_recorded),)
    got = drift.drift_table(tf.constant(given), tf.constant(have_previous), counts, *extra)
    want = _numpy_table(sums, have_previous, counts, bool(have_recorded))
    np.testing.assert_array_equal(got.numpy(), want)  # sqrt and / are correctly rounded in both
