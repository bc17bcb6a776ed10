"""Target/online pair anomalies, derived from a decoded DRIFT series.

Read side: plain Python and numpy (never tensorflow), so the TensorBoard plugin
and the CLI derive the same events from the same records. See
`tb_gradscope.pairs.drift` for what each column means.
"""

from __future__ import annotations

from tb_gradscope.format.metadata import KIND_SPECS, Kind

# Columns the DRIFT writer adds after the format's required ones. Readers look
# columns up by name, so records without them still decode.
DRIFT_EXTRA_COLUMNS = ("online_step", "gap", "tau_reverse", "gap_reverse", "optimizer_vars")
DRIFT_COLUMNS = tuple(KIND_SPECS[Kind.DRIFT].columns) + DRIFT_EXTRA_COLUMNS
