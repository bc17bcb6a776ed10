"""Record TF1 graph-mode training (`tf.compat.v1.Session`, MonitoredTrainingSession).

    gs = GraphRecorder(logdir, losses={"loss1": loss1, "loss2": loss2},
                       train_ops={"loss1": train1, "loss2": train2},
                       rules=["never(loss1, Agent/layer2_2)"])
    sess = gs.wrap(sess)            # or: hooks=[gs.hook()]

This module's names are the package's public API; the modules beside it are
its private parts: `recorder` (`GraphRecorder`), `args` (argument checks),
`calls` (memos that keep each run call cheap), `graph` (graph surgery), `ops`
(the ops added to the user's graph, from `record.stats`' kernel), `reuse` (the train op's own gradients, where
provably the recorder's), `pairs`, `rules`, `session` (the wrapped session),
`static` (the analysis), `steps`, `writer` (the event file). Imported by users (and
the root's lazy `GraphRecorder`) and `demos`; builds on `tb_gradscope.record`'s
kernels and `analysis`. See docs/TF1.md.
"""

from tb_gradscope.integrations.tf1.pairs import pair_scopes
from tb_gradscope.integrations.tf1.recorder import GraphRecorder
from tb_gradscope.record.losses import StartPoint

__all__ = ["GraphRecorder", "StartPoint", "pair_scopes"]
