"""Random ops that keep their random state in their kernel, found in a traced step.

`tf.random.normal`, `tf.random.uniform`, `tf.random.shuffle`, `tf.nn.dropout`
(without a Generator) and the like are stateful ops seeded by `seed` / `seed2`
attributes (from the global and the op seed): each traced function holds its own
kernels, each advancing its own random stream at every run. Two traced functions
of one step (the callback's plain and recorded train functions) taking turns
would therefore draw other numbers than one function run every batch. Draws
whose state is a variable (`tf.random.Generator`, `keras.random` with a
`SeedGenerator`, Keras's Dropout) or that are stateless do not have the problem.
"""

from __future__ import annotations

from typing import Any

from tb_gradscope.analysis._flatten import SYNTHETIC, flatten


def kernel_random_ops(graph: Any) -> list[str]:
    """Names of the ops in `graph` (and every body it calls) that draw from a kernel-held stream."""
    flat = flatten(graph)
    found = []
    for op, op_type, name in zip(flat.ops, flat.types, flat.names):
        if op_type in SYNTHETIC:
            continue
        if op.op_def.is_stateful and "seed2" in op.node_def.attr:
            found.append(name)
    return found
