"""Record TF1 graph-mode training (`tf.compat.v1.Session`, MonitoredTrainingSession).

    gs = GraphRecorder(logdir, losses={"loss1": loss1, "loss2": loss2},
                       train_ops={"loss1": train1, "loss2": train2},
                       rules=["never(loss1, Agent/layer2_2)"])
    sess = gs.wrap(sess)            # or: hooks=[gs.hook()]

This module's names are the package's public API; the modules beside it are
its private parts, underscored: `_recorder` (`GraphRecorder`), `_args`
(argument checks), `_calls` (memos that keep each run call cheap), `_graph`
(graph surgery), `_ops` (the ops added to the user's graph, from
`record._stats`' kernel), `_ref_reads` (reference variables read before a
call), `_reuse` (the train op's own gradients, where provably the
recorder's), `_pairs`, `_rules`, `_session` (the wrapped session), `_static`
(the analysis), `_steps`, `_writer` (the event file). Imported by users (and
the root's lazy `GraphRecorder`) and `demos`; builds on `tb_gradscope.record`'s
kernels and `analysis`. See docs/TF1.md.
"""

from tb_gradscope.integrations.tf1._pairs import pair_scopes
from tb_gradscope.integrations.tf1._recorder import GraphRecorder
from tb_gradscope.record._losses import StartPoint

__all__ = ["GraphRecorder", "StartPoint", "pair_scopes"]
