"""The read side: decoded logs -> the conclusions a user acts on, for the tab and the CLI alike.

Loads a run (`reader`: through any TensorBoard data provider; `logdir`: a
logdir through TensorBoard's ingestion, checked first by `eventfiles`), decodes
it into Python objects (`runs`), and concludes: the flow state of a cell
(`flowstate`), pair anomalies from drift series (`drift`, `anomalies`, copy periods
judged between records in `copy_schedule`), rules
evaluated over the logs (`violations`, `tracks`), `doctor`'s findings
(`findings` over `records`, `flow`, `targets`, `leaks`, `health`) and
`report`'s data (`summary`). Imports only `format`, `scopes` and `rules` (and
TensorBoard's data API), never tensorflow; imported by `plugin` and `commands`
only, so the tab and `tb-gradscope` cannot disagree.
"""
