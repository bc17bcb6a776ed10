"""How many graph ops recording adds to a step, per traced variant of `rec.function`.

Issue 34 asks what a recorded step adds in ops, not only in time: per-op and
per-call costs, not passes over the values, dominate at these sizes. For the
README custom loop (16 units; pair with a hard copy every 50, a rule,
`record_drift`) and the DDPG recipe (two Adams in `rec.training_step()`, two
Polyak pairs), each variant's op count (its own graph plus the bodies of the
functions and control-flow branches it calls, constants counted apart) is
printed beside the same step written without tb_gradscope, as a plain
`tf.function` (`bench.user_steps`' unrecorded steps), and split by the part
of the recorder that adds them: the recorder builds its ops under
`tb_gradscope/<part>/` (`record/_op_scope.py`); `outside` is what the step's
own ops differ by (a per-loss gradient, say). No timing: the counts are exact
and the same on every machine with the same TensorFlow.

    python -m bench.bench_ops
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402

from bench import user_steps  # noqa: E402
from bench.harness import parse_args, report  # noqa: E402
from tb_gradscope.pairs import pair_models  # noqa: E402
from tb_gradscope.record import Recorder  # noqa: E402
from tb_gradscope.record._op_scope import OP_SCOPE  # noqa: E402
from tb_gradscope.record._step_function import RECORDED  # noqa: E402

PARTS = ("grad_stats", "update_stats", "drift", "rules", "write", "step")
OUTSIDE = "outside"


def _part(name: str) -> str:
    """The recorder part an op (or a branch function, by its name) belongs to."""
    for separator in ("/", "_"):  # a branch function's name is its scope with "_"
        prefix = OP_SCOPE + separator
        if name.startswith(prefix):
            rest = name[len(prefix) :]
            return next((p for p in PARTS if rest.startswith(p)), OUTSIDE)
    return OUTSIDE


def op_counts(concrete) -> tuple[collections.Counter, collections.Counter]:
    """({part: ops}, {part: constants}) of a concrete function and every function it calls."""
    graph_def = concrete.graph.as_graph_def()
    named = [(_part(n.name), n) for n in graph_def.node]
    for function in graph_def.library.function:
        named.extend((_part(function.signature.name), n) for n in function.node_def)
    ops = collections.Counter(part for part, _ in named)
    consts = collections.Counter(part for part, n in named if n.op == "Const")
    return ops, consts


def _readme(logdir: str, units: int = 16):
    """The README step: (recorder, plain python step, recorded step, batch)."""
    online, target, optimizer = user_steps._dqn_nets(units)
    counter = tf.Variable(0, dtype=tf.int64, trainable=False)
    plain = user_steps._dqn_step(online, target, optimizer, counter, None)
    rec = Recorder(
        logdir=logdir,
        every_n_steps=user_steps.EVERY,
        models={"online": online, "target": target},
        pairs=[pair_models(target, online, every=user_steps.COPY_EVERY)],
        rules=["never(td, target/*)"],
    )
    step = user_steps._readme_step(rec, online, target, optimizer)
    return rec, plain, step, user_steps._dqn_batch()


def _ddpg(logdir: str):
    nets = user_steps._ddpg_nets(64)
    actor, critic, actor_t, critic_t = nets[:4]
    rec = Recorder(
        logdir=logdir,
        every_n_steps=user_steps.EVERY,
        models={"actor": actor, "critic": critic, "actor_t": actor_t, "critic_t": critic_t},
        pairs=[
            pair_models(actor_t, actor, tau=user_steps.TAU),
            pair_models(critic_t, critic, tau=user_steps.TAU),
        ],
    )
    batch = tuple(tf.zeros(shape) for shape in ((64, 8), (64, 2), (64,), (64, 8)))
    return rec, user_steps._ddpg_step(nets, None), user_steps._ddpg_step(nets, rec), batch


def main() -> None:
    parse_args(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory() as logdir:
        for group, build in (("readme16", _readme), ("ddpg", _ddpg)):
            rec, plain, step, batch = build(os.path.join(logdir, group))
            plain_ops, plain_consts = op_counts(tf.function(plain).get_concrete_function(*batch))
            report(f"ops_{group}_plain_tf_function", plain_ops.total())
            wrapped = rec.function(step)
            wrapped(*batch)  # traces the recorded variant, as a first call does
            for mode, variant in wrapped._variants.items():  # noqa: SLF001 - what each variant runs
                ops, consts = op_counts(variant.get_concrete_function(*batch))
                report(f"ops_{group}_{mode}_added", ops.total() - plain_ops.total())
                report(f"ops_{group}_{mode}_added_constants", consts.total() - plain_consts.total())
                if mode == RECORDED:
                    for part in (*PARTS, OUTSIDE):
                        added = ops[part] - plain_ops[part], consts[part] - plain_consts[part]
                        report(f"ops_{group}_{mode}_added_{part}", added[0])
                        report(f"ops_{group}_{mode}_added_{part}_constants", added[1])
            rec.close()


if __name__ == "__main__":
    main()
