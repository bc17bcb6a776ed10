"""Recording under tf.distribute: the global gradients, written once, by the chief.

Under `MirroredStrategy` and `MultiWorkerMirroredStrategy` a train step runs
once per replica (`strategy.run`), each replica holding the gradients of its
share of the batch; the optimizer sums them across replicas before applying
(Keras 3 all-reduces inside `apply_gradients`). The recorded norms must be those
of that global sum, and ||sum_r g_r|| is not a function of the replicas' own
norms, so the gradients themselves are summed: at recorded steps only.

A cross-replica reduction cannot run inside a `tf.cond` in replica context (it
is a `merge_call`, which TF refuses inside a nested graph). So each replica
first puts its layout-aligned gradients through a local `tf.cond` (per-loss
backward passes still run only at recorded steps; other steps pass empty
tensors), then one `merge_call` hands every replica's gradients to
cross-replica context, where the recorder's own `tf.cond` on the recorded-step
predicate sums them with the strategy's reduction and computes and writes the
tables once. A `merge_call` costs nothing when the step runs: it only changes
where the step's graph is built.

Only the chief writes (`is_chief`): in multi-worker training the other
workers open no file, but still run the same reductions, which are
collectives every worker must join.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.record._context import ExecutionContext

Aligned = Mapping[str, Sequence[Any]]  # {loss: gradients aligned with the layout}


def replicas_in_sync() -> int:
    """How many replicas run this step together (1 outside a distributed replica context)."""
    context = tf.distribute.get_replica_context()
    if context is None:  # cross-replica context: not inside strategy.run
        return 1
    return int(context.num_replicas_in_sync)


def is_first_replica() -> bool:
    """True unless tracing the step of a replica other than the first.

    Every replica traces the same step into one graph; its static analysis
    needs one set of losses, and the first replica's is the one every worker
    agrees on (the chief, which writes the FlowGraph, holds replica 0).
    """
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync <= 1:
        return True
    replica = tf.get_static_value(context.replica_id_in_sync_group)
    return replica is None or int(replica) == 0


def is_chief() -> bool:
    """False on a multi-worker worker that is not the chief (it must not write).

    The strategy in scope says so when it knows (`should_save_summary`);
    otherwise `TF_CONFIG` does: the task `chief`, or worker 0 of a cluster
    without one. Single-process training is always the chief.
    """
    if ExecutionContext.current().distributed:  # asked when the sink is made, by no call
        try:
            return bool(tf.distribute.get_strategy().extended.should_save_summary)
        except (AttributeError, NotImplementedError):
            pass  # a strategy that does not say: TF_CONFIG decides
    return _chief_by_tf_config(os.environ.get("TF_CONFIG", ""))


def _chief_by_tf_config(text: str) -> bool:
    try:
        config = json.loads(text) if text else {}
    except ValueError:
        return True
    task = config.get("task") or {}
    cluster = config.get("cluster") or {}
    kind, index = task.get("type"), task.get("index", 0)
    if not kind or kind == "chief":
        return True
    return kind == "worker" and int(index) == 0 and "chief" not in cluster


def local_variable(initial_value: Any, **kwargs: Any) -> tf.Variable:
    """A plain variable on one device, even inside a strategy's scope.

    `initial_value` may be a callable (run eagerly, so it can be called while
    a step is traced).

    For the recorder's own bookkeeping that only cross-replica code writes
    (which tags a writer has seen): a mirrored copy would make every write
    touch every device, and a `tf.cond` assigning it cannot be placed.
    """

    def plain(next_creator: Any, **args: Any) -> tf.Variable:
        del next_creator  # the strategy's creator would mirror it
        return private.unmirrored_variable(**args)

    with tf.init_scope(), tf.variable_creator_scope(plain):
        value = initial_value() if callable(initial_value) else initial_value
        return tf.Variable(value, **kwargs)


OnError = Callable[[Exception], None]  # re-raises what must stop training


def is_coordination(error: BaseException) -> bool:
    """True for the exception MirroredStrategy raises in a replica to stop it
    after another replica failed: it must propagate, never be swallowed."""
    return private.is_replica_stop(error)


def once(fn: Callable[..., Any], *args: Any, on_error: OnError) -> Any:
    """`fn(*args)` once per step: in cross-replica context when replicas run it.

    For recording that reads mirrored state (variables, the step) and writes:
    every replica would compute the same thing, and a write traced in a
    replica's graph cannot be placed beside the writer's resources. Tensor
    arguments arrive as the first replica's values. A failure of `fn` goes to
    `on_error` there (it would otherwise stop every replica), and gives None.
    """
    if replicas_in_sync() <= 1:
        return fn(*args)

    def merged(strategy: tf.distribute.Strategy, *per_replica: Any) -> Any:
        first = tf.nest.map_structure(
            lambda v: strategy.experimental_local_results(v)[0], per_replica
        )
        return _guarded(on_error, fn, *first)

    return tf.distribute.get_replica_context().merge_call(merged, args=args)


def _guarded(on_error: OnError, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as e:  # noqa: BLE001 - recording must not stop the replicas
        on_error(e)
        return None


def record_global(
    record: tf.Tensor,
    local: Callable[[], Aligned],
    then: Callable[[Mapping[str, Callable[[], list[Any]]]], Any],
    on_error: OnError,
    ctx: ExecutionContext,
) -> Any:
    """Calls `then` once, in cross-replica context, with the global gradients.

    Args:
      record: this replica's recorded-step predicate (the same on every replica).
      local: () -> {loss: this replica's layout-aligned gradients}; traced under
        a `tf.cond`, so it runs at recorded steps only.
      then: receives {loss: () -> the layout-aligned *summed* gradients}; the
        callables reduce across replicas when called, so `then` must call them
        only where it records (under its own predicate).
      ctx: where the calling step runs (the replica's context, read at its entry).

    Returns what `then` returns (from the first replica's merge), or None
    eagerly at an unrecorded step. A failure of `then` goes to `on_error`.
    """
    context = tf.distribute.get_replica_context()
    layout: dict[str, tuple[int, list[int]]] = {}
    dtypes: list[list[tf.DType]] = []

    def compute() -> list[list[tf.Tensor]]:
        flat = []
        dtypes.clear()
        for name, grads in local().items():
            present = [i for i, g in enumerate(grads) if g is not None]
            layout[name] = (len(grads), present)
            dense = [tf.convert_to_tensor(grads[i]) for i in present]
            dtypes.append([g.dtype for g in dense])
            flat.append(dense)
        return flat

    if ctx.eager:
        if not bool(record):
            return None
        flat = compute()
    else:

        def skip():
            return [[tf.zeros([0], d) for d in group] for group in dtypes]

        flat = tf.cond(record, compute, skip)

    def merged(strategy: tf.distribute.Strategy, per_replica: list[list[Any]]) -> Any:
        makers = {}
        for (name, (size, present)), values in zip(layout.items(), per_replica):
            makers[name] = lambda size=size, present=present, values=values: _summed(
                strategy, size, present, values
            )
        return _guarded(on_error, then, makers)

    return context.merge_call(merged, args=(flat,))


def _summed(
    strategy: tf.distribute.Strategy, size: int, present: Sequence[int], values: Sequence[Any]
) -> list[Any]:
    """The replicas' gradients summed as the optimizer sums them, layout-aligned."""
    out: list[Any] = [None] * size
    for i, value in zip(present, values):
        out[i] = strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
    return out
