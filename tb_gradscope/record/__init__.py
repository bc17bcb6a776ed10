"""The TF2 recorder: in-graph gradient and update stats per loss and scope, written to event files.

    from tb_gradscope.record import Recorder, StartPoint

Exports only the public names (`Recorder`, `StartPoint`, `DriftMonitor`,
`Stats` for XLA steps, `GradscopeWarning`, `NoWriterError`); the modules
beside them are the engine room, private by their leading underscore. See
`Recorder` for the two ways in. `_stats` holds the one statistics kernel (TF2,
Keras and TF1 graph mode); `_drift` and `_drift_monitor` record target/online
pairs' drift; variables are named as scopes by `tb_gradscope._naming`. Imports
`format`, `analysis`, `pairs`, `rules`, `_naming` and `scopes`, never the read
side; imported by
`integrations`, `demos` and users (through the root).
"""

from tb_gradscope.core.warn import GradscopeWarning
from tb_gradscope.record._drift_monitor import DriftMonitor
from tb_gradscope.record._losses import StartPoint
from tb_gradscope.record._recorder import Recorder
from tb_gradscope.record._writing import NoWriterError, Stats

__all__ = [
    "DriftMonitor",
    "GradscopeWarning",
    "NoWriterError",
    "Recorder",
    "StartPoint",
    "Stats",
]
