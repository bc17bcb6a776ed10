"""Target/online pairs: declare or detect them, and record their drift.

    from tb_gradscope.pairs import DriftMonitor, detect_pairs, pair_models

`pairs` builds `Pair`s (plain data), `detect` finds undeclared ones, `drift`
is the in-graph kernel and `monitor` writes one DRIFT table per pair per
recorded step. The read side (modes, anomalies) is `tb_gradscope.anomalies`.
"""

from tb_gradscope.pairs.detect import detect_pairs
from tb_gradscope.pairs.monitor import DriftMonitor
from tb_gradscope.pairs.pairs import Pair, pair_ema, pair_models, pair_prefixes

__all__ = ["DriftMonitor", "Pair", "detect_pairs", "pair_ema", "pair_models", "pair_prefixes"]
