"""Flow rules checked while recording: at trace time and at recorded steps.

The `RuleChecker` (tb_gradscope.rules) decides what is broken; this module
decides when, and writes the violations as EVENTS records through the
recorder's sink *before* `on_violation` is applied, so a raise never loses them.

- Trace time (after the traced step's FlowGraph is found): Python, so the
  FlowGraph (with the rule texts in its attrs) and any violations are written
  eagerly (`tf.init_scope`) at the recorder's current step, then the policy
  applies: "raise" raises `FlowRuleViolation` from the call that traced
  (autograph re-raises it as the same type, with its context added), before
  any step runs.
- Recorded steps, eagerly: the tables are EagerTensors; checked on the spot.
- Recorded steps, in a `Recorder.function`'s recorded variant: the graph
  tests the rows a rule constrains (`rule_gate`) and returns the test and the
  tables; the host checks after the call when a row was hit, writes the
  violations and applies the policy: "raise" raises `FlowRuleViolation` from
  the call itself, after the step's update ran.
- Recorded steps, inside `tf.function`: the graph first tests the rows a rule
  constrains (`rule_gate`: did one get a gradient?); only then a
  `tf.py_function` hands the tables to the checker and returns the violations
  as JSON blobs, which the graph writes through the sink. It reads tables only
  (training values are untouched) and runs at recorded steps only, when a
  rule may be broken; the step waits for it there. A `blocked` rule makes the
  host check every recorded step. Under "raise" a second callback raises after
  the write and a flush: TensorFlow reports it as `tf.errors.UnknownError`
  whose message holds the FlowRuleViolation text. Inside
  `jit_compile=True` nothing is checked in the compiled step; `Recorder.write`
  checks the tables it writes.

Every violation seen is also kept in `violations`. A failure of the checking
itself warns once and checking stops; training goes on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.core.rules import STEP_EVENTS, TRACE_EVENTS
from tb_gradscope.core.warn import warn_once
from tb_gradscope.record import _rule_gate as rule_gate
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._op_scope import kernel
from tb_gradscope.record._writing import Emitter, recorded_only
from tb_gradscope.rules import FlowRuleViolation, Rule, RuleChecker, apply_policy
from tb_gradscope.rules.policy import LOG, RAISE


class RuleSteps:
    """Checks a recorder's rules and writes their violations through its emitter."""

    def __init__(self, rules: Sequence[Rule], on_violation: str, emitter: Emitter, recorder: str):
        self.checker = RuleChecker(rules, on_violation=LOG)  # the policy is applied after writing
        self.on_violation = on_violation
        self.emitter = emitter
        self.recorder = recorder
        self.violations: list[fmt.Event] = []
        self.disabled = False
        emitter.flowgraph_attrs = {"rules": self.checker.rule_texts}

    # ----- trace time ------------------------------------------------------

    def at_trace(self, flowgraph: fmt.FlowGraph, step_variable: tf.Variable) -> None:
        """Checks the traced step's FlowGraph; writes it and the violations now."""
        with tf.init_scope():
            step = int(step_variable.numpy())
            # A loss missing from this trace may be traced by another function
            # of the step (one per optimizer): `tb-gradscope check` reports
            # rule losses that match nothing in the whole run.
            events = self._safely(
                lambda: [
                    e
                    for e in self.checker.at_trace(flowgraph, step)
                    if e.evidence.get("unmatched") != "loss"
                ]
            )
            self.emitter.write_flowgraph(tf.constant(step, tf.int64), tf.constant(True))
            self._write_now(events, step, TRACE_EVENTS)
        apply_policy(events, self.on_violation)

    # ----- recorded steps --------------------------------------------------

    @kernel("rules")
    def at_step(
        self,
        step: tf.Tensor,
        record: tf.Tensor,
        grads: Mapping[str, tf.Tensor],
        scopes: Sequence[str],
        updates: tf.Tensor | None,
        ctx: ExecutionContext,
        defer: Callable[[Callable[..., None], Sequence[tf.Tensor]], bool] | None = None,
    ) -> None:
        """Checks a recorded step's tables ({loss: GRAD_STATS}, UPDATE_STATS or None).

        `defer(callback, tensors)`, where given, may take the host's check out
        of the graph (a `Recorder.function`'s recorded variant: the host runs
        it after the call); it returns False when it cannot."""
        if self.disabled or not grads:
            return
        names = list(grads)
        tensors = [grads[n] for n in names] + ([updates] if updates is not None else [])

        def check(step_value: Any, *arrays: Any) -> list[fmt.Event]:
            values = [np.asarray(a) for a in arrays]
            upd = values[len(names)] if updates is not None else None
            return self._safely(
                lambda: self.checker.at_step(int(step_value), dict(zip(names, values)), scopes, upd)
            )

        def check_now(step_value: Any, *arrays: Any) -> None:
            """On the host: checks, writes the violations, applies the policy."""
            events = check(step_value, *arrays)
            try:
                self._write_now(events, int(step_value), STEP_EVENTS)
            except Exception as e:  # writing them must never break training
                self._stop(e)
            apply_policy(events, self.on_violation)

        if ctx.eager:
            if bool(record):
                check_now(step.numpy(), *[t.numpy() for t in tensors])
            return
        watched = rule_gate.watched_rows(self.checker.rules, names, scopes)
        hit = tf.constant(True) if watched is None else rule_gate.any_hit(grads, watched)
        if hit is None:
            return

        def check_if_hit(hit_value: Any, step_value: Any, *arrays: Any) -> None:
            if bool(hit_value) and not self.disabled:
                check_now(step_value, *arrays)

        # Deferred only from a recorded variant, where `record` is the constant True.
        if defer is None or not defer(check_if_hit, [hit, step, *tensors]):
            recorded_only(
                tf.logical_and(record, hit),
                lambda: self._in_graph(check, step, tensors),
                lambda: tf.constant(False),
            )

    def _in_graph(self, check, step: tf.Tensor, tensors: list) -> tf.Tensor:
        """The host check of a step whose tables may break a rule: writes the
        violations and, under "raise", raises after writing and flushing them."""
        pending: list[fmt.Event] = []

        def host(step_value, *arrays):
            events = check(step_value.numpy(), *[a.numpy() for a in arrays])
            if self.on_violation != RAISE:
                apply_policy(events, self.on_violation)
            pending[:] = events
            return np.asarray([fmt.encode_json(e.to_json()) for e in events], dtype=object)

        blobs = tf.py_function(host, [step, *tensors], tf.string)
        blobs.set_shape([None])
        found = tf.size(blobs) > 0
        tag, meta = self.emitter.metadata(fmt.Kind.EVENTS, STEP_EVENTS, ())
        written = self.emitter.sink.write(tag, meta, blobs, step, found)
        if self.on_violation == RAISE:

            def stop(step_value):
                raise FlowRuleViolation.from_events(pending)

            def flush_then_stop():
                with self.emitter.sink.as_default():
                    flushed = tf.summary.flush()
                with tf.control_dependencies([flushed] if flushed is not None else []):
                    return tf.py_function(stop, [step], tf.bool)

            with tf.control_dependencies([written]):
                written = tf.cond(found, flush_then_stop, lambda: tf.constant(False))
        return tf.identity(written)

    # ----- internals -------------------------------------------------------

    def _write_now(self, events: list[fmt.Event], step: int, name: str) -> None:
        """Writes violations eagerly (EVENTS record `name` at `step`) and flushes."""
        if not events:
            return
        tag, meta = self.emitter.metadata(fmt.Kind.EVENTS, name, ())
        blobs = tf.constant([fmt.encode_json(e.to_json()) for e in events])
        self.emitter.sink.write(tag, meta, blobs, tf.constant(step, tf.int64), tf.constant(True))
        self.emitter.sink.flush()

    def _safely(self, action) -> list[fmt.Event]:
        """Runs the checker; a failure of checking warns once and turns checking off."""
        try:
            events = list(action())
        except FlowRuleViolation:
            raise
        except Exception as e:  # checking must never break training
            self._stop(e)
            return []
        self.violations.extend(events)
        return events

    def _stop(self, error: Exception) -> None:
        """Turns checking off after a failure of its own, said once."""
        self.disabled = True
        warn_once(
            ("rules_failed", self.recorder),
            f"Recorder '{self.recorder}' stopped checking rules after an error "
            f"({type(error).__name__}: {error}); training continues unaffected",
        )
