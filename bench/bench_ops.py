"""How many graph ops recording adds to a step, per traced variant of `rec.function`.

Issue 34 asks what a recorded step adds in ops, not only in time: per-op and
per-call costs, not passes over the values, dominate at these sizes. For the
README custom loop (16 units; pair with a hard copy every 50, a rule,
`record_drift`) and the DDPG recipe (two Adams in `rec.training_step()`, two
Polyak pairs), each variant's op count (its own graph plus the bodies of the
functions and control-flow branches it calls, constants counted apart) is
printed beside the same step written without tb_gradscope, as a plain
`tf.function` (`bench.user_steps`' unrecorded steps). No timing: the counts
are exact and the same on every machine with the same TensorFlow.

    python -m bench.bench_ops
"""

from __future__ import annotations

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


def op_counts(concrete) -> tuple[int, int]:
    """(all ops, constants) of a concrete function and every function it calls."""
    graph_def = concrete.graph.as_graph_def()
    nodes = list(graph_def.node)
    for function in graph_def.library.function:
        nodes.extend(function.node_def)
    return len(nodes), sum(n.op == "Const" for n in nodes)


def _readme(logdir: str):
    online, target, optimizer = user_steps._dqn_nets(16)
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
            report(f"ops_{group}_plain_tf_function", plain_ops)
            wrapped = rec.function(step)
            wrapped(*batch)  # traces the recorded variant, as a first call does
            for mode, variant in wrapped._variants.items():  # noqa: SLF001 - what each variant runs
                ops, consts = op_counts(variant.get_concrete_function(*batch))
                report(f"ops_{group}_{mode}_added", ops - plain_ops)
                report(f"ops_{group}_{mode}_added_constants", consts - plain_consts)
            rec.close()


if __name__ == "__main__":
    main()
