"""The instrumented Keras train step: stats computed in the step, kept in variables.

`StepProbe.wrap(train_step)` returns a step that runs the model's own
`train_step` unchanged inside an outer persistent GradientTape. Keras's inner
tape computes and applies the very gradient it always does; the outer tape only
watches, so per-output losses (captured from the CompileLoss) can be
differentiated afterwards, at recorded steps only, under a `tf.cond`.

Summaries cannot be written inside XLA (`jit_compile=True`), and with
`steps_per_execution > 1` several steps run in one call, so tables are not
written from the step: they go into a small ring of variables (one slot per
recorded step that one execution can hold), which the callback reads in Python
between executions. The step of a recorded batch is the optimizer's
`iterations` before it applies, so it counts the batches actually trained on.

Under `tf.distribute` the step runs once per replica: the replicas' gradients
are summed and the ring filled once, in cross-replica context
(`record.distribute.record_global`); the ring lives on one device. With a
LossScaleOptimizer (`mixed_float16`), each loss is differentiated times the
scale Keras's step used and the tables are unscaled; a recorded batch whose
gradients overflow (Keras skips it) only counts a skip, in a ring of its own.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope import _naming as naming
from tb_gradscope._naming import VariableLayout
from tb_gradscope.core.warn import warn_once
from tb_gradscope.format.flowgraph import FlowGraph
from tb_gradscope.format.metadata import KIND_SPECS, OPTIONAL_GRAD_COLUMNS, Kind
from tb_gradscope.integrations.keras import _capture as capture
from tb_gradscope.integrations.keras import _custom as custom_lib
from tb_gradscope.integrations.keras import _kernel_rng as kernel_rng
from tb_gradscope.record import _distribute as distribute
from tb_gradscope.record import _flow as flow
from tb_gradscope.record import _loss_scale as loss_scale
from tb_gradscope.record import _stats as stats
from tb_gradscope.record._context import ExecutionContext

_no_autograph = tf.autograph.experimental.do_not_convert
_N_GRAD = len(KIND_SPECS[Kind.GRAD_STATS].columns)
_N_UPDATE = len(KIND_SPECS[Kind.UPDATE_STATS].columns)


class StepProbe:
    """In-graph recording for one model: a ring of stats slots and the wrapper.

    Args:
      model: the compiled, built Keras model.
      vlayout: its recorded variables and scope tree.
      every: record steps divisible by this.
      slots: ring size; at least the recorded steps one execution can hold.
      name: used in warnings and analysis messages.
      on_error: called with the exception when building the instrumentation
        fails at trace time (the model's own step still runs, unrecorded).
      custom: the model overrides `train_step` (a GAN's two optimizers): its
        losses are the targets of the GradientTape.gradient calls it makes
        (`custom.py`), and its steps are counted per batch, since
        `model.optimizer` may be one the step never uses.
    """

    def __init__(
        self,
        model: Any,
        vlayout: VariableLayout,
        every: int,
        slots: int,
        name: str,
        on_error: Callable[[Exception], None],
        custom: bool = False,
        grad_columns: Sequence[str] = OPTIONAL_GRAD_COLUMNS,
    ):
        self.model = model
        self.grad_columns = tuple(grad_columns)
        self.custom = custom
        self.batches = (
            distribute.local_variable(np.int64(0), trainable=False, name="gradscope_batches")
            if custom
            else None
        )
        self.vlayout = vlayout
        self.losses: list[capture.OutputLoss] = []
        self.every = every
        self.slots = slots
        self.name = name
        self._on_error = on_error
        self._rollup = stats.RollUp.from_layout(vlayout.layout)
        self.flowgraph: FlowGraph | None = None
        self.captured: set[str] = set()
        self.grad_tables: tf.Variable | None = None
        self.traces = 0
        # Ops of the step drawing from a kernel-held random stream (`kernel_rng.py`):
        # while any is found, every batch must run this one traced function.
        self.kernel_random: list[str] = []
        self._reader: tuple[bool, Any] | None = None  # (has grad tables, concrete read function)
        n_scopes = len(vlayout.layout.scopes)
        self.enabled = distribute.local_variable(False, trainable=False, name="gradscope_enabled")
        self.slot_step = distribute.local_variable(
            np.full([slots], -1, np.int64), trainable=False, name="gradscope_slot_step"
        )
        self.update_tables = distribute.local_variable(
            tf.zeros([slots, n_scopes, _N_UPDATE]), trainable=False, name="gradscope_update_tables"
        )
        # Recorded batches the loss scaler skipped (mixed precision): step, count, scale.
        self.skip_step = distribute.local_variable(
            np.full([slots], -1, np.int64), trainable=False, name="gradscope_skip_step"
        )
        self.skip_count = distribute.local_variable(
            np.zeros([slots], np.int64), trainable=False, name="gradscope_skip_count"
        )
        self.skip_scale = distribute.local_variable(
            np.zeros([slots], np.float32), trainable=False, name="gradscope_skip_scale"
        )

    @staticmethod
    def slots_for(steps_per_execution: int, every: int) -> int:
        """Recorded steps one execution of `steps_per_execution` steps can hold."""
        return max(1, math.ceil(steps_per_execution / every))

    def wrap(self, train_step: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """`train_step`, observed; what it computes and applies is untouched."""

        @_no_autograph
        def instrumented_train_step(data: Any) -> Any:
            self.traces += 1
            ctx = ExecutionContext.current()  # once per trace of the step
            before = self._guarded(lambda: self._before(ctx), ctx)
            observing = custom_lib.observe(self.model) if self.custom else contextlib.nullcontext()
            with capture.capture_losses(self.model) as captured, observing as seen:
                with tf.GradientTape(persistent=True) as tape:
                    logs = train_step(data)
            if not ctx.eager:
                self._find_kernel_random()
            if before is not None:
                taped = seen.named(logs) if seen is not None else {}
                self._guarded(
                    lambda: self._after(tape, captured, *before, taped=taped, ctx=ctx), ctx
                )
            if self.batches is not None:
                self.batches.assign_add(1)
            return logs

        instrumented_train_step.gradscope_probe = self
        return instrumented_train_step

    def plain(self, train_step: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """`train_step` as it runs at batches the host knows are not recorded:
        nothing added (but a custom step's batch counter, which counts them)."""
        if self.batches is None:
            return train_step

        @_no_autograph
        def counted_train_step(data: Any) -> Any:
            logs = train_step(data)
            self.batches.assign_add(1)
            return logs

        return counted_train_step

    @property
    def step_variable(self) -> tf.Variable:
        """What counts the recorded steps: the optimizer's iterations, or the
        batches a custom train_step ran."""
        return self.batches if self.batches is not None else self.model.optimizer.iterations

    def current_step(self) -> int:
        return int(self.step_variable.numpy())

    @property
    def scaled(self) -> bool:
        """Whether the step runs under a loss scaler (which may skip batches)."""
        return loss_scale.is_loss_scale_optimizer(self.model.optimizer)

    def switch(self, on: bool) -> None:
        """Turns recording on or off (eagerly, also when called while tracing)."""
        with tf.init_scope():
            self.enabled.assign(on)

    def read(self) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, int]:
        """(slot steps, grad tables [slot, loss, scope, col] or None, update
        tables, current step), in one call of a concrete function (four eager
        reads cost ~3x more)."""
        key = self.grad_tables is not None
        if self._reader is None or self._reader[0] != key:
            self._reader = (
                key,
                tf.function(self._read_all, autograph=False).get_concrete_function(),
            )
        values = [v.numpy() for v in self._reader[1]()]
        grads = values[3] if key else None
        return values[0], grads, values[1], int(values[2])

    def _read_all(self) -> list[tf.Tensor]:
        steps, updates, current, grads = self.read_tensors()
        return [steps, updates, current] + ([grads] if grads is not None else [])

    def read_tensors(self) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor | None]:
        """In a traced function: (slot steps, update tables, current step,
        grad tables or None), read when it runs."""
        grads = tf.identity(self.grad_tables) if self.grad_tables is not None else None
        return (
            tf.identity(self.slot_step),
            tf.identity(self.update_tables),
            tf.cast(tf.convert_to_tensor(self.step_variable), tf.int64),
            grads,
        )

    def read_skips(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(steps, skipped batches, loss scale) of the skip ring's slots (step -1: empty)."""
        return self.skip_step.numpy(), self.skip_count.numpy(), self.skip_scale.numpy()

    # ----- in-graph --------------------------------------------------------

    def _guarded(self, build: Callable[[], Any], ctx: ExecutionContext) -> Any:
        if ctx.eager:
            return None  # run_eagerly=True: nothing is traced, nothing recorded
        try:
            return build()
        except Exception as e:  # noqa: BLE001 - the user's step must still run
            if distribute.is_coordination(e):
                raise
            self._on_error(e)
            return None

    def _find_kernel_random(self) -> None:
        if self.kernel_random:
            return
        try:
            self.kernel_random = kernel_rng.kernel_random_ops(tf.compat.v1.get_default_graph())
        except Exception as e:  # noqa: BLE001 - unsure: keep to the one function
            self.kernel_random = [f"<the step's graph could not be read: {type(e).__name__}>"]

    def _before(
        self, ctx: ExecutionContext
    ) -> tuple[tf.Tensor, tf.Tensor, list[Any], tf.Tensor | None]:
        # Read now, before the update: tf.cast of an int64 tf.Variable (tf_keras)
        # would return the variable itself, read again after the optimizer.
        optimizer = self.model.optimizer
        step = tf.cast(tf.convert_to_tensor(self.step_variable), tf.int64)
        record = tf.logical_and(
            self.enabled.read_value(), tf.equal(tf.math.floormod(step, self.every), 0)
        )
        # The loss scale Keras's train step multiplies by, read before its apply changes it.
        scale = (
            loss_scale.current_scale(optimizer)
            if loss_scale.is_loss_scale_optimizer(optimizer)
            else None
        )
        variables = list(self.vlayout.variables)
        if ctx.xla:  # XLA needs equal shapes on both branches

            def empty():
                return [tf.zeros_like(tf.convert_to_tensor(v)) for v in variables]
        else:

            def empty():
                return [tf.zeros([0], v.dtype) for v in variables]

        before = tf.cond(record, lambda: stats.snapshot(variables), empty)
        return step, record, list(before), scale

    def _after(
        self,
        tape: tf.GradientTape,
        captured: capture.Captured,
        step,
        record,
        before,
        scale,
        taped: dict[str, custom_lib.TapedLoss],
        ctx: ExecutionContext,
    ) -> None:
        found = captured.losses or [capture.OutputLoss(name, None) for name in taped]
        found += [capture.OutputLoss(name, None) for name in captured.added]
        if not self.losses and found:
            self.losses = list(found)
            shape = [self.slots, len(self.losses), len(self.vlayout.layout.scopes), _N_GRAD]
            self.grad_tables = distribute.local_variable(
                lambda: tf.zeros(shape), trainable=False, name="gradscope_grad_tables"
            )
        with tape:  # the weighting (and loss scale) must be on the tape too
            losses = {
                self.losses[i].name: _scaled(
                    capture.weighted(self.model, value, self.losses[i]), scale
                )
                for i, value in sorted(captured.values.items())
                if i < len(self.losses) and captured.losses[i] == self.losses[i]
            }
        known = {loss.name for loss in self.losses}
        added = {name: value for name, value in captured.added.items() if name in known}
        watched = {}
        if not losses:  # a custom train_step: the losses its own tapes differentiated
            losses = {name: t.target for name, t in taped.items() if name in known}
            watched = {name: taped[name].watched for name in losses}
            for name in losses:
                if taped[name].shape is not None:
                    warn_once(
                        (id(self), "per_sample", name),
                        f"GradscopeCallback: loss '{name}' of model '{self.name}''s train_step "
                        f"is not a scalar (shape {list(taped[name].shape)}); recorded is the "
                        "gradient of its sum, which is what tape.gradient computes for it",
                    )
        losses.update(added)  # each add_loss term a loss of its own
        self.captured |= set(losses)
        if self.flowgraph is None and losses and distribute.is_first_replica():
            self.flowgraph = flow.analyze_step(
                tf.compat.v1.get_default_graph(),
                losses,
                self.vlayout.variable_scopes(),
                self.vlayout.layout.scopes,
                self.name,
                watched,
            )
        variables = list(self.vlayout.variables)

        def gradient(name: str, value: Any) -> list[Any]:
            grads = tape.gradient(value, variables)
            if name not in watched:
                return grads
            # The step's own tape cannot give a gradient to what it did not watch.
            keys = {naming.variable_key(v) for v in watched[name]}
            return [g if naming.variable_key(v) in keys else None for g, v in zip(grads, variables)]

        def store(grads):
            return self._store(step, record, before, scale, grads)

        if distribute.replicas_in_sync() > 1:

            def local():
                return {name: gradient(name, value) for name, value in losses.items()}

            distribute.record_global(record, local, store, self._on_error, ctx)
        else:
            store(
                {
                    name: (lambda name=name, value=value: gradient(name, value))
                    for name, value in losses.items()
                }
            )

    def _store(
        self,
        step: tf.Tensor,
        record: tf.Tensor,
        before: list[Any],
        scale: tf.Tensor | None,
        grads: dict,
    ) -> None:
        """At a recorded step, puts the step's tables into the ring's slot.

        `grads` maps each captured loss to a callable returning its gradients,
        aligned with the recorded variables (called only at recorded steps).
        With a loss scale, the tables are of the unscaled gradients, and a step
        whose gradients overflowed (the loss scaler skips it) only counts a skip.
        """
        variables = list(self.vlayout.variables)
        order = [loss.name for loss in self.losses]
        slot = tf.math.floormod(tf.math.floordiv(step, self.every), self.slots)
        index = tf.reshape(slot, [1, 1])

        def put(tables: list[tf.Tensor]) -> tf.Tensor:
            if tables:
                self.grad_tables.scatter_nd_update(index, tf.stack(tables)[None])
            update = stats.update_table(before, variables, self._rollup)
            self.update_tables.scatter_nd_update(index, update[None])
            self.slot_step.scatter_nd_update(index, tf.reshape(step, [1]))
            return tf.constant(True)

        def store() -> tf.Tensor:
            tables = []
            if self.grad_tables is not None:
                shape = self.grad_tables.shape[1:]
                tables = [tf.zeros(shape[1:], tf.float32)] * shape[0]
                for name, make in grads.items():
                    table = stats.grad_table(make(), self._rollup, self.grad_columns)
                    tables[order.index(name)] = (
                        table if scale is None else loss_scale.unscaled(table, scale)
                    )
            if scale is None:
                return put(tables)
            return tf.cond(
                loss_scale.overflowed(tables),
                lambda: self._count_skip(step, scale),
                lambda: put(tables),
            )

        tf.cond(record, store, lambda: tf.constant(False))

    def _count_skip(self, step: tf.Tensor, scale: tf.Tensor) -> tf.Tensor:
        """Counts a batch the loss scaler skipped at `step` (its own small ring)."""
        slot = tf.reshape(tf.math.floormod(tf.math.floordiv(step, self.every), self.slots), [1, 1])
        # Whole (tiny) reads, then gathers: XLA has no kernel for a gather from a resource.
        again = tf.equal(tf.gather_nd(self.skip_step.read_value(), slot), step)
        count = tf.where(
            again, tf.gather_nd(self.skip_count.read_value(), slot) + 1, tf.ones([1], tf.int64)
        )
        self.skip_count.scatter_nd_update(slot, count)
        self.skip_scale.scatter_nd_update(slot, tf.reshape(scale, [1]))
        self.skip_step.scatter_nd_update(slot, tf.reshape(step, [1]))
        return tf.constant(True)


def _scaled(loss: tf.Tensor, scale: tf.Tensor | None) -> tf.Tensor:
    """The loss as Keras differentiates it: times the loss scale, if any."""
    return loss if scale is None else loss * tf.cast(scale, loss.dtype)
