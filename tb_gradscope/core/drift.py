"""The DRIFT columns from a pair's per-scope sums, on the host (numpy).

For recorders that reduce on their own device and move the sums to the host
once (the PyTorch recorder). The formulas are those of TF's in-graph kernel
(`record/_drift.py`), so `read/anomalies.py` judges every run alike. With t,
o the target and online values now, tp, op one step earlier and tr the target
at the pair's previous DRIFT record, the sums per scope are, in `SUMS` order:
||t-o||^2, ||o||^2, ||t-tp||^2, <t-tp, o-tp>, ||o-tp||^2, ||o-op||^2,
<o-op, t-op>, ||t-op||^2, ||t-tr||^2.
"""

from __future__ import annotations

import numpy as np

from tb_gradscope.format.metadata import DRIFT_COLUMNS

SUMS = ("dist2", "online2", "a2", "ab", "b2", "c2", "ce", "e2", "f2")
_DIST2, _ON2, _A2, _AB, _B2, _C2, _CE, _E2, _F2 = range(len(SUMS))
_NEED_PREVIOUS = {"target_step", "tau", "online_step", "gap", "tau_reverse", "gap_reverse"}


def drift_table(
    sums: np.ndarray,
    have_previous: bool,
    optimizer_vars: np.ndarray,
    have_recorded: bool,
) -> np.ndarray:
    """[n_scopes, 9] float64 sums -> the DRIFT table [n_scopes, len(DRIFT_COLUMNS)] float32.

    Columns needing the previous step's values are NaN without them
    (`have_previous`), `target_moved` without a previous record
    (`have_recorded`); a ratio is NaN where its denominator is not > 0."""
    sums = np.asarray(sums, np.float64)
    root = np.sqrt(np.maximum(sums, 0.0))

    def ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
        return np.divide(num, den, out=np.full_like(num, np.nan), where=den > 0)

    columns = {
        "drift": ratio(root[:, _DIST2], root[:, _ON2]),
        "distance": root[:, _DIST2],
        "online_norm": root[:, _ON2],
        "target_step": root[:, _A2],
        "tau": ratio(sums[:, _AB], sums[:, _B2]),
        "online_step": root[:, _C2],
        "gap": root[:, _B2],
        "tau_reverse": ratio(sums[:, _CE], sums[:, _E2]),
        "gap_reverse": root[:, _E2],
        "optimizer_vars": np.asarray(optimizer_vars, np.float64),
        "target_moved": root[:, _F2] if have_recorded else np.full(len(sums), np.nan),
    }
    if not have_previous:
        for name in _NEED_PREVIOUS:
            columns[name] = np.full(len(sums), np.nan)
    return np.stack([columns[c] for c in DRIFT_COLUMNS], axis=1).astype(np.float32)
