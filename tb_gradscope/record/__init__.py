"""The TF2 recorder: in-graph gradient and update stats per loss and scope, written to event files.

    from tb_gradscope.record import Recorder, StartPoint

Exports only the public names (`Recorder`, `StartPoint`, `DriftMonitor`,
`Stats` for XLA steps, `GradscopeWarning`, `NoWriterError`); the modules
beside them are the engine room. See `Recorder` for the two ways in. `stats`
holds the pure-TF kernel (also usable from TF1 graph mode); `drift` and
`drift_monitor` record target/online pairs' drift; variables are named as
scopes by `tb_gradscope.naming`. Imports `format`, `analysis`, `pairs`,
`rules`, `naming` and `scopes`, never the read side; imported by
`integrations`, `demos` and users (through the root).
"""

from tb_gradscope.record.drift_monitor import DriftMonitor
from tb_gradscope.record.emit import Stats
from tb_gradscope.record.losses import StartPoint
from tb_gradscope.record.recorder import Recorder
from tb_gradscope.record.warn import GradscopeWarning
from tb_gradscope.record.writing import NoWriterError

__all__ = [
    "DriftMonitor",
    "GradscopeWarning",
    "NoWriterError",
    "Recorder",
    "StartPoint",
    "Stats",
]
