"""Every private TensorFlow symbol the TF1 integration uses, in one place.

There is no public way to ask these three questions of a TF1 graph; keeping
them here makes a TensorFlow upgrade that removes one fail in one obvious
place (`tests/test_tf1_ref_reads.py` imports each).
"""

from __future__ import annotations

import tensorflow as tf


def is_ref_dtype(dtype: tf.DType) -> bool:
    """A reference dtype (`float32_ref`): the tensor is a variable's buffer itself."""
    return bool(dtype._is_ref_dtype)  # noqa: SLF001 - no public test


def in_control_flow(op: tf.Operation) -> bool:
    """Inside a TF1 `cond`/`while_loop`: its output may be dead or per-iteration."""
    return op._get_control_flow_context() is not None  # noqa: SLF001 - no public accessor


def update_input(op: tf.Operation, index: int, tensor: tf.Tensor) -> None:
    """Makes `tensor` input `index` of `op` (an op the recorder built itself)."""
    op._update_input(index, tensor)  # noqa: SLF001 - no public way to rewire an edge
