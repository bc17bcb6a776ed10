"""The gradients a recorder trains with and the ones it records, and what it copies.

`total_gradients` is what the user's optimizer applies: bitwise
`tape.gradient(sum of losses, variables)`. `per_loss` gives, per loss, a
callable producing that loss's gradients aligned with the recorded layout; the
callables run only on recorded steps (one more backward pass per loss when
there are several). `snapshot_if_recording` copies the variables handed to the
optimizer, only at recorded steps, for ||delta theta||.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.record import _losses as losses_lib
from tb_gradscope.record import _stats as stats
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._layout import LayoutResolver
from tb_gradscope.record._losses import StartPoint
from tb_gradscope.record._writing import recorded_only


def total_gradients(tape: Any, losses: Mapping[str, Any], variables: Sequence[Any]) -> list[Any]:
    """Gradients of the sum of `losses` (start points seeded with their gradients)."""
    targets, seeds = zip(*(losses_lib.target_and_seed(v) for v in losses.values()))
    if any(isinstance(v, StartPoint) for v in losses.values()):
        seeds = [tf.ones_like(t) if s is None else s for t, s in zip(targets, seeds)]
        with not_recording(tape):
            return tape.gradient(list(targets), variables, output_gradients=seeds)
    if len(targets) == 1:
        with not_recording(tape):
            return tape.gradient(targets[0], variables)
    recording = private.tape_is_recording(tape)
    with contextlib.nullcontext() if recording else tape:
        total = tf.add_n(list(targets))
    with not_recording(tape):
        return tape.gradient(total, variables)


def not_recording(tape: Any) -> contextlib.AbstractContextManager:
    """`tape.stop_recording()` while the tape's context is open, else nothing.

    `rec.tape()` is persistent only so that each loss can be differentiated; a
    persistent tape asked for gradients inside its context records the
    gradient ops on itself (TF warns: "persistent tape inside its context"),
    which a user's plain tape never does (it stops recording then)."""
    return tape.stop_recording() if private.tape_is_recording(tape) else contextlib.nullcontext()


def per_loss(
    layout: LayoutResolver,
    tape: Any,
    losses: Mapping[str, Any],
    variables: Sequence[Any],
    total: Sequence[Any],
) -> dict[str, Callable[[], list[Any]]]:
    """{loss: () -> its layout-aligned gradients}; one loss reuses `total`."""
    if len(losses) == 1:
        (name,) = losses
        return {name: lambda: layout.aligned(name, total, variables)}
    makers = {}
    for name, value in losses.items():
        target, seed = losses_lib.target_and_seed(value)

        def make(name=name, target=target, seed=seed):
            with not_recording(tape):
                grads = tape.gradient(target, variables, output_gradients=seed)
            return layout.aligned(name, grads, variables)

        makers[name] = make
    return makers


def given(
    layout: LayoutResolver, pairs_by_loss: Mapping[str, Sequence[tuple[Any, Any]]]
) -> dict[str, Callable[[], list[Any]]]:
    """{loss: () -> aligned gradients} for gradients the user computed."""
    return {
        name: (
            lambda name=name, pairs=pairs: layout.aligned(
                name, [g for g, _ in pairs], [v for _, v in pairs]
            )
        )
        for name, pairs in pairs_by_loss.items()
    }


def snapshot_if_recording(
    layout: LayoutResolver,
    pairs: Sequence[tuple[Any, Any]],
    record: tf.Tensor,
    ctx: ExecutionContext,
) -> list[Any]:
    """Layout-aligned copies of the variables handed to the optimizer, taken
    only at recorded steps; None for variables the step cannot write."""
    vlayout = layout.vlayout
    handed = sorted({i for _, v in pairs if (i := vlayout.index_of(v)) is not None})
    variables = [vlayout.variables[i] for i in handed]
    if ctx.xla:  # XLA needs equal shapes on both branches

        def empty():
            return [tf.zeros_like(tf.convert_to_tensor(v)) for v in variables]
    else:

        def empty():
            return [tf.zeros([0], v.dtype) for v in variables]

    copies = recorded_only(record, lambda: stats.snapshot(variables), empty) if variables else []
    before: list[Any] = [None] * len(vlayout.variables)
    for i, copy in zip(handed, copies):
        before[i] = copy
    return before
