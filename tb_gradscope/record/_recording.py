"""What a Recorder's calls do inside a step, once their arguments are checked.

`Recorder` (recorder.py) is the public API: arguments, docstrings, errors for
the user. `Recording` is the work behind it, on the recorder's state: a step's
loss tables routed through loss scaling and tf.distribute, the copy of the
variables before `apply`, the step's close (analysis of the traced graph, the
||delta theta|| table, rules, the step's advance) and drift. Failures of
recording itself go through `guard`: one warning, then the recorder steps
aside, never the training loop.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope.core.warn import warn_once
from tb_gradscope.format.metadata import Kind
from tb_gradscope.record import _distribute as distribute
from tb_gradscope.record import _gradients as gradients_lib
from tb_gradscope.record import _loss_scale as loss_scale_lib
from tb_gradscope.record._block import Block
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._drift_monitor import Before
from tb_gradscope.record._state import RecorderState
from tb_gradscope.record._step_function import PLAIN
from tb_gradscope.record._writing import NoWriterError, Stats
from tb_gradscope.rules.policy import FlowRuleViolation


class Recording:
    """The in-step work of one recorder (its state, step counter and name)."""

    def __init__(self, state: RecorderState, step: tf.Variable, name: str, loss_scale: Any):
        self.s = state
        self.step = step
        self.name = name
        self.loss_scale = loss_scale

    # ----- gradients ---------------------------------------------------------

    def given(
        self,
        pairs_by_loss: Mapping[str, list],
        losses: Mapping[str, Any] | None,
        tape: Any,
        ctx: ExecutionContext,
    ) -> Stats | None:
        """`record_gradients`: records gradients the user computed."""
        self.s.gradients_seen(ctx)
        if self.s.disabled or self.s.variants.mode(ctx) is not None:
            return None
        with self.guard():
            seen = [v for pairs in pairs_by_loss.values() for _, v in pairs]
            if not self.s.layout.ensure(seen):
                return None
            if distribute.is_first_replica():
                self.s.stash_losses(losses or {}, tape, ctx)
            return self._record_losses(gradients_lib.given(self.s.layout, pairs_by_loss), ctx)
        return None

    def per_loss(
        self,
        tape: Any,
        losses: Mapping[str, Any],
        variables: Sequence[Any],
        grads: Sequence[Any],
        ctx: ExecutionContext,
    ) -> None:
        """`gradients`: records each loss's gradients from the recorder's tape
        (and warns once when no variable got a gradient)."""
        self.s.gradients_seen(ctx)
        if all(g is None for g in grads):
            warn_once(
                (id(self.s), "no_gradient", tuple(losses)),
                f"Recorder '{self.name}': no variable gets a gradient from losses "
                f"{sorted(losses)}; compute them inside `with rec.tape() as tape:` "
                "(ops after the block are not recorded) from the variables passed",
            )
        if self.s.disabled or self.s.variants.mode(ctx) is not None:
            return
        with self.guard():
            if self.s.layout.ensure(variables):
                if distribute.is_first_replica():
                    self.s.stash_losses(losses, tape, ctx)
                self._record_losses(
                    gradients_lib.per_loss(self.s.layout, tape, losses, variables, grads), ctx
                )

    def _record_losses(
        self, makers: Mapping[str, Callable[[], list]], ctx: ExecutionContext
    ) -> Stats | None:
        """Records each loss's gradients; under tf.distribute, the global (summed)
        ones; with a loss scale, unscaled (read now, before the optimizer changes it)."""
        s, step = self.s, self.step
        if self.loss_scale is None:

            def record(given):
                return s.record_losses(step, given, ctx)
        elif ctx.xla:
            raise ValueError(
                f"Recorder '{self.name}' with loss_scale cannot record inside a "
                "jit_compile=True step; compile the step without XLA"
            )
        else:
            scale = loss_scale_lib.current_scale(self.loss_scale)

            def record(given):
                return loss_scale_lib.record_scaled_losses(s, step, given, scale, ctx)

        if distribute.replicas_in_sync() > 1:
            return distribute.record_global(
                s.should_record(step, ctx),
                lambda: {name: make() for name, make in makers.items()},
                record,
                self.step_aside,
                ctx,
            )
        return record(makers)

    # ----- the optimizer step and the step's close ---------------------------

    def apply(self, optimizer: Any, pairs: list, ctx: ExecutionContext) -> Any:
        """`apply`: the optimizer step, observed, and the step's close."""
        s = self.s
        block = s.block if s.block is not None and s.block.inside() else None
        if s.variants.mode(ctx) is not None:  # a step traced to run unrecorded
            result = optimizer.apply_gradients(pairs)
            if block is None:
                self.step.assign_add(1)
                s.advanced(ctx)
            return result
        before = None
        if not s.disabled:
            with self.guard():
                if s.layout.ensure([v for _, v in pairs]) and block is None:
                    before = s.snapshot(self.step, pairs, ctx)
        # After this step's recording branches (see Emitter.take_recorded): an
        # ordering only, the values applied are the same.
        recorded = [] if ctx.distributed else s.emitter.take_recorded(ctx)
        with tf.control_dependencies(recorded):
            result = optimizer.apply_gradients(pairs)
        if s.monitor is not None:
            s.monitor.note_optimizer_variables(v for g, v in pairs if g is not None)
        s.note_optimizer(optimizer, ctx)
        if block is not None:
            if block.eager and not ctx.eager:
                self._finish_traced_in_block(block, ctx)
            if ctx.eager:
                self._warn_if_rules_have_no_loss()
            return result
        if before is not None and not s.disabled:
            with self.guard():
                self._once(ctx, lambda b: self._record_update(b, ctx), before)
        self._warn_if_rules_have_no_loss()
        self.advance(ctx)
        return result

    def _warn_if_rules_have_no_loss(self) -> None:
        """Rules given, and a step that closes without any loss handed over
        (gradients from the user's own tape straight into `apply`): its rules
        would pass without being tested. ||delta theta|| is still recorded;
        the losses cannot be (no name, no loss tensor to analyze)."""
        if self.s.checks is None or self.s.losses_seen:
            return
        warn_once(
            (id(self.s), "rules_without_loss"),
            f"Recorder '{self.name}': rules were given, but this step handed rec.apply gradients "
            "of no recorded loss (from its own GradientTape), so no rule can be checked on it; "
            "only ||delta theta|| is recorded. Compute them with rec.gradients(tape, {'name': loss}, "
            "variables), or pass them to rec.record_gradients({'name': grads_and_vars}, "
            "losses={'name': loss}, tape=tape) before rec.apply",
        )

    def advance(self, ctx: ExecutionContext) -> None:
        """`advance`: the step's close (if not `apply`'s), then the counter moves on."""
        s = self.s
        if not s.disabled and s.layout.vlayout is not None and s.variants.mode(ctx) is None:
            with self.guard():
                self._once(ctx, lambda: self._finish_step(ctx))
        self.step.assign_add(1)
        s.advanced(ctx)

    def enter_block(self, block: Block, ctx: ExecutionContext) -> None:
        """Entering `training_step()` eagerly: the copy for ||delta theta||."""
        if block.eager and not self.s.disabled:
            with self.guard():
                block.before = self.s.eager_block_snapshot(self.step, ctx)
                block.due = self.s.due_steps()
        elif not self.s.disabled:  # a late variant (runs at late steps only): copied at entry
            with self.guard():
                block.before = self.s.late_block_snapshot(ctx)

    def end_block(self, block: Block, ctx: ExecutionContext) -> None:
        """Leaving `training_step()`: analysis, ||delta theta|| over the block,
        rules, then the step advances once."""
        s = self.s
        if not block.eager:  # traced whole: its losses were handed over in this trace
            self._warn_if_rules_have_no_loss()
        if not s.disabled and s.layout.vlayout is not None and s.variants.mode(ctx) is None:
            with self.guard():
                self._once(ctx, lambda b: self._close_block(b, ctx), block)
        self.step.assign_add(1)
        s.advanced(ctx)

    def _record_update(self, before: list[Any], ctx: ExecutionContext) -> None:
        """After the optimizer: analyzes the traced step, records ||delta theta||."""
        self.s.analyze_traced_step(self.step, self.name, ctx)
        self.s.check_step(self.step, self._update_table(before, ctx), ctx)

    def _update_table(
        self, before: list[Any], ctx: ExecutionContext, late: bool = False
    ) -> tf.Tensor | None:
        """Writes the UPDATE_STATS table from the values `before` the step
        (`late`: eagerly, at this unrecorded step too); returns it when rules
        need it (else None)."""
        s = self.s
        variables, rollup = s.layout.vlayout.variables, s.layout.rollup

        def maker():
            return s.kernels.update_table(before, variables, rollup, ctx)

        if s.checks is None or ctx.xla:
            s.emit(self.step, Kind.UPDATE_STATS, {"": maker}, ctx, late=late)
            return None
        return s.record_updates(self.step, maker, ctx, late=late)

    def _close_block(self, block: Block, ctx: ExecutionContext) -> None:
        s = self.s
        s.settle_late(self.step, ctx)
        if block.eager:
            if block.analyzed:
                s.write_flowgraph_now(self.step)
        elif s.analyze_traced_step(self.step, self.name, ctx) and not ctx.xla:
            s.emitter.write_flowgraph(*s.now(self.step, ctx))
        updates = None
        if block.before is not None:
            # A late step (a loss overdue): written when one was recorded in the block.
            late = block.due is not None and s.due_steps() != block.due
            updates = self._update_table(block.before, ctx, late=late)
        s.check_step(self.step, updates, ctx)

    def _finish_traced_in_block(self, block: Block, ctx: ExecutionContext) -> None:
        """A function traced inside an eager block: its graph's analysis (merged
        into the run's FlowGraph, written at the block's exit) and rules."""
        s = self.s
        self._warn_if_rules_have_no_loss()
        if s.disabled or s.layout.vlayout is None:
            return
        with self.guard():
            block.analyzed |= bool(
                self._once(
                    ctx, lambda: s.analyze_traced_step(self.step, self.name, ctx, defer_write=True)
                )
            )
            self._once(ctx, lambda step, updates: s.check_step(step, updates, ctx), self.step, None)

    def _finish_step(self, ctx: ExecutionContext) -> None:
        """Before `step` advances: analysis (if `apply` did not run it) and rules."""
        s = self.s
        if s.analyze_traced_step(self.step, self.name, ctx) and not ctx.xla:
            s.emitter.write_flowgraph(*s.now(self.step, ctx))
        s.check_step(self.step, None, ctx)

    # ----- drift ---------------------------------------------------------------

    def record_drift(self, ctx: ExecutionContext) -> None:
        """`record_drift`: the pairs' drift, or nothing, by variant."""
        s = self.s
        if s.monitor is None or s.variants.mode(ctx) == PLAIN:
            return
        if ctx.xla:
            raise ValueError(
                "Recorder.record_drift cannot run inside a jit_compile=True function "
                "(summaries are unsupported on XLA); call it after the compiled step"
            )
        offset = s.drift_offset(ctx)
        due = s.variants.recorded_every_call(ctx)  # the host runs it at recorded steps only
        at_start = s.variants.before(ctx)
        before = None
        if at_start is not None:  # the call's start: the step before if it advances once
            _, sides, advanced = at_start
            once = advanced + (s.block is not None) == 1
            # At the run's first step the call's start is the pair as initialised.
            before = Before(sides, one_step=once)
        self._once(ctx, lambda: s.monitor.record(offset=offset, due=due, before=before))

    # ----- XLA: stats written outside ----------------------------------------

    def write(self, all_stats: Sequence[Stats | None], ctx: ExecutionContext) -> None:
        """`write`: Stats returned from a `jit_compile=True` step, and their rules."""
        if ctx.xla:
            raise ValueError(
                "Recorder.write cannot run inside a jit_compile=True function "
                "(summaries are unsupported on XLA); return rec.stats() from the "
                "compiled step and call rec.write(...) on its result outside it"
            )
        for item in all_stats:
            if item is not None and not isinstance(item, Stats):
                raise ValueError(
                    f"Recorder.write takes what rec.stats() returned from the jit_compile=True "
                    f"step, got {type(item).__name__} {item!r}"
                )
        for item in all_stats:
            if item is not None and not self.s.disabled:
                with self.guard():
                    self.s.emitter.write(item)
                    self.s.check_written(item, ctx)

    def flush(self) -> None:
        """`flush`: the sink's flush; warns once if XLA stats went unwritten."""
        emitter = self.s.emitter
        if emitter.deferred_made and not emitter.deferred_written:
            warn_once(
                (id(self.s), "unwritten"),
                f"Recorder '{self.name}' computed stats inside a jit_compile=True "
                "step but nothing wrote them: return rec.stats() from the step and "
                "call rec.write(result) after it",
            )
        emitter.sink.flush()

    def _once(self, ctx: ExecutionContext, fn: Callable[..., Any], *args: Any) -> Any:
        """`fn(*args)` once per step. Under a tf.distribute strategy through
        `distribute.once` (a merge_call, failures to `step_aside`); otherwise
        called directly, so a single-device record crosses no extra module."""
        if not ctx.distributed:
            return fn(*args)
        return distribute.once(fn, *args, on_error=self.step_aside)

    # ----- failures ------------------------------------------------------------

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Turns an unexpected failure of recording into one warning, then steps aside."""
        try:
            yield
        except Exception as e:  # recording must never break the training loop
            self.step_aside(e)

    def step_aside(self, error: Exception) -> None:
        """Stops recording after `error`, with one warning; re-raises the errors
        meant for the user (no writer, a rule violation) and tf.distribute's own."""
        if isinstance(error, (NoWriterError, FlowRuleViolation)) or distribute.is_coordination(
            error
        ):
            raise error
        self.s.disabled = True
        warn_once(
            (id(self.s), "internal"),
            f"Recorder '{self.name}' stopped recording after an error "
            f"({type(error).__name__}: {error}); training continues unaffected",
        )
