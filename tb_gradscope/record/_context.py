"""Where recording runs: eager or traced, under XLA, under tf.distribute.

The one module that asks TensorFlow. A recorder call reads it once at its
entry and hands the object down; code that may run in another graph than
its caller's (a kernel traced once for eager callers, a write under
`tf.init_scope`) asks again where it runs.
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from tb_gradscope import _tf_private as private


@dataclasses.dataclass(frozen=True)
class ExecutionContext:
    """Read once, never changed.

    Attributes:
      eager: executing eagerly (no graph being traced).
      xla: tracing inside an XLA-compiled function (jit_compile=True), or a
        graph nested in one.
      distributed: a tf.distribute strategy is in scope (replica or
        cross-replica context alike).
    """

    eager: bool
    xla: bool
    distributed: bool

    @classmethod
    def current(cls) -> ExecutionContext:
        eager = tf.executing_eagerly()
        return cls(
            eager=eager,
            xla=not eager and private.in_xla_context(tf.compat.v1.get_default_graph()),
            distributed=tf.distribute.has_strategy(),
        )
