"""What every recorder shares, importing no framework (neither tensorflow nor torch).

`writer` (records from numpy tables into an event file, through TensorBoard's
framing, `crc`, or a caller's), `tables` (the RecordInfo of each table a recorder
writes), `rules` (rules arguments and the host-side rule checks of a recorded
step), `pairs` (target/online pairs as plain data and their scope layout),
`drift` (DRIFT columns from per-scope sums), `loss_scale` (the SKIPPED
event of a step a loss scaler skipped), `source` (the user's source line)
and `warn` (warn once, then step aside). Imported by `record/`,
`integrations/`, `pairs/` and `torch/`; imports only `format`, `scopes` and
`rules`. Safe on the read side.
"""
