"""The TF2 recorder: per-loss gradient stats and applied updates, per scope.

Two ways in, eager or inside `tf.function` (also `jit_compile=True`):

1. Gradients the user already computed, with no extra backward pass::

     rec.record_gradients({"td": list(zip(grads, variables))})
     rec.apply(optimizer, list(zip(grads, variables)))

2. A recorder-owned persistent tape; per-loss gradients are computed only at
   recorded steps, and what is returned to apply is bitwise
   `tape.gradient(sum of losses, variables)`::

     with rec.tape() as tape:
         losses = {"td": td_loss, "aux": aux_loss}
     rec.apply(optimizer, rec.gradients(tape, losses, variables))

Recording is gated in-graph every `every_n_steps` steps, so one trace serves
every step. Bad arguments raise ValueError at trace time; failures of recording
itself warn once and the recorder steps aside, never the training loop.

This module is the public API: arguments, checks and documentation. The work
behind each call is `recording.Recording`'s. The recorder composes the other
pieces onto its step counter and its one event file: target/online pairs
(`pairs=`, a DriftMonitor: `targets`), flow rules (`rules=`: `checks`) and
gradient conflict between losses (`conflict=`: `conflict`, computed with the
per-loss tables in `tables`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _naming as naming
from tb_gradscope.core.rules import resolve_rules
from tb_gradscope.core.warn import warn_once
from tb_gradscope.format.flowgraph import FlowGraph
from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS
from tb_gradscope.record import _gradients as gradients_lib
from tb_gradscope.record import _loss_scale as loss_scale_lib
from tb_gradscope.record import _losses as losses_lib
from tb_gradscope.record import _options as options
from tb_gradscope.record import _targets as targets
from tb_gradscope.record._block import Block
from tb_gradscope.record._checks import RuleSteps
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._layout import LayoutResolver
from tb_gradscope.record._optimizer_state import build_outside_trace
from tb_gradscope.record._recording import Recording
from tb_gradscope.record._state import RecorderState
from tb_gradscope.record._step_function import StepFunction, variant_due
from tb_gradscope.record._watch import Watch
from tb_gradscope.record._writing import Emitter, Stats, SummarySink
from tb_gradscope.scopes import ScopeSpec

# Our code builds its own control flow (tf.cond); autograph must not rewrite it
# when a user's tf.function calls into the recorder.
_no_autograph = tf.autograph.experimental.do_not_convert


class Recorder(tf.Module):
    """Records where each loss's gradient flows, per scope, into TensorBoard.

    Args:
      logdir: directory for the recorder's own event file; None writes to the
        user's default `tf.summary` writer (a clear error if none is set when a
        step is traced).
      every_n_steps: record at steps where `step % every_n_steps == 0`.
      models: {root: model}, a sequence of models, or one model (Keras or
        tf.Module); each model's name (or key) is the root of its scopes, and
        its variables are the ones recorded.
      variables: explicit variables to record (in addition to `models`).
        Default: the variables of `models`, else those seen in the first
        recorded gradients.
      scopes: a `tb_gradscope.scopes.ScopeSpec` (include, exclude, max_depth,
        mapping).
      name: the recorder's name, used in messages.
      pairs: target/online `tb_gradscope.pairs.Pair`s whose drift is recorded
        (DRIFT records), or "auto" to detect them among `models`/`variables`.
      rules: flow rules checked on the traced step's FlowGraph and at every
        recorded step: Rule objects or strings ("never(td, target/*)"), or a
        TOML rules file path. Violations are written as EVENTS records (and
        kept in `rec.violations`) before `on_violation` applies; the rule
        texts go in the FLOWGRAPH record for `tb-gradscope check`. Inside
        tf.function a recorded step hands its tables to the checker through a
        tf.py_function (recorded steps only; it reads, never writes, values).
      on_violation: "log", "warn" or "raise" (FlowRuleViolation, after the
        violations are written). Inside tf.function a trace-time violation
        is still a FlowRuleViolation; one at a run step arrives as
        tf.errors.UnknownError carrying its text. None: the rules file's
        policy, else "log".
      conflict: with two or more losses, record per pair of losses the cosine
        of their gradients on every scope both reach (CONFLICT records "a|b").
      loss_scale: mixed precision: the LossScaleOptimizer (Keras 3 or
        tf_keras) whose loss scale multiplies the losses handed to the
        recorder (`optimizer.scale_loss(loss)`). Recorded norms are then of the
        unscaled gradients, and a recorded step whose gradients overflow (the
        optimizer skips it) is written as a SKIPPED event instead of its tables.
      grad_columns: the optional gradient columns to record, from ("max_abs",
        "zero_frac") (the default: both). Each costs passes over every
        gradient at every recorded step; one left out reads NaN, "not
        recorded" (grad_vars, l2 and nonfinite are always recorded). For
        every-step recording of large models: `grad_columns=()`.

    Under `tf.distribute` (MirroredStrategy, MultiWorkerMirroredStrategy) call
    the recorder inside `strategy.run`, as the optimizer is: the recorded norms
    are of the global gradients, summed across replicas as the optimizer sums
    them (at recorded steps only), and only the chief writes.

    Drift is read by `rec.record_drift()`, once per training step, after
    `rec.apply` and after the user's target update (eagerly or in the same
    tf.function). Pairs are recorded in the steps that record gradients and
    labelled with their step, as the gradients are (the pair after that
    step's update), each compared with the step before: call it every step,
    not only at recorded ones. A declared copy between two records is judged from how far the
    target moved between them. DQN, hard copy every C::

      rec = Recorder("logs/dqn", models={"online": q, "target": q_target},
                     pairs=[pair_models(q_target, q, every=C)],
                     rules=["never(td, target/*)"])

      @tf.function
      def train_step(batch):
          with rec.tape() as tape:
              losses = {"td": td_loss(batch)}
          rec.apply(opt, rec.gradients(tape, losses, q.trainable_variables))
          if rec.step % C == 0:  # rec.step counts applied steps
              copy_weights(q, q_target)
          rec.record_drift()

    EMA (Polyak) target::

      rec = Recorder("logs/sac", models={"critic": critic, "target": target},
                     pairs=[pair_models(target, critic, tau=0.005)])
      ...
      rec.apply(opt, grads_and_vars)
      for t, o in zip(target.weights, critic.weights):
          t.assign(0.995 * t + 0.005 * o)
      rec.record_drift()

    `rec.step` is an int64 tf.Variable; `tf.train.Checkpoint(recorder=rec)`
    saves it so a resumed run continues its steps.

    Under `jit_compile=True` summaries cannot be written (XLA has no kernel for
    them): the stats are computed inside the compiled step and written outside::

      @tf.function(jit_compile=True)
      def step(x, y):
          ...  # rec.gradients / rec.record_gradients, rec.apply as usual
          return loss, rec.stats()

      loss, stats = step(x, y)
      rec.write(stats)
    """

    def __init__(
        self,
        logdir: str | None = None,
        every_n_steps: int = 10,
        models: Any = None,
        variables: Sequence[Any] | None = None,
        scopes: ScopeSpec | None = None,
        name: str = "gradscope",
        pairs: Any = None,
        rules: Any = None,
        on_violation: str | None = None,
        conflict: bool = True,
        loss_scale: Any = None,
        grad_columns: Collection[str] = OPTIONAL_GRAD_COLUMNS,
    ):
        options.check_name(name)
        options.check_logdir(logdir)
        super().__init__(name=name)
        loss_scale_lib.check_loss_scale(loss_scale)
        self._loss_scale = loss_scale
        options.check_every(every_n_steps, "every_n_steps", "steps")
        options.check_scopes(scopes)
        recorded_columns = options.check_grad_columns(grad_columns)
        explicit = None
        if variables is not None:
            explicit = losses_lib.check_variables(variables, "Recorder(variables=...)")
        roots = naming.model_roots(models)
        with tf.init_scope():
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        found_pairs = targets.resolve_pairs(pairs, models, explicit, name)
        rule_list, policy = resolve_rules(rules or [], on_violation)
        self._s = RecorderState(
            Emitter(SummarySink(logdir, name), name, every_n_steps),
            LayoutResolver(name, roots, explicit, scopes),
            every_n_steps,
            self.step,
        )
        self._s.conflict = bool(conflict)
        self._s.grad_columns = recorded_columns
        if rule_list:
            self._s.checks = RuleSteps(rule_list, policy, self._s.emitter, name)
        self._s.monitor = targets.make_monitor(
            found_pairs, self._s.emitter.sink, self.step, every_n_steps, name
        )
        self._r = Recording(self._s, self.step, name, loss_scale)

    # ----- the two ways in -------------------------------------------------

    @_no_autograph
    def record_gradients(
        self,
        grads_by_loss: Mapping[str, Any],
        losses: Mapping[str, Any] | None = None,
        tape: tf.GradientTape | None = None,
    ) -> Stats | None:
        """Records gradients the user computed: {loss_name: grads_and_vars}.

        `losses` optionally maps loss names to their tensors (or StartPoint)
        for static analysis; `tape`, the GradientTape they were computed with,
        lets the analysis see its boundary (a network run before the tape
        opened gets no gradient: blocked, not "ignored"). Inside
        `jit_compile=True` returns the Stats to hand to `write` outside;
        otherwise writes and returns None.
        """
        given = losses_lib.check_given(grads_by_loss, losses)
        return self._r.given(given, losses, tape, ExecutionContext.current())

    def tape(self) -> tf.GradientTape:
        """A persistent GradientTape for `gradients`."""
        return tf.GradientTape(persistent=True)

    @_no_autograph
    def gradients(
        self,
        tape: tf.GradientTape,
        losses: Mapping[str, Any],
        variables: Sequence[Any],
    ) -> list[tuple[Any, Any]]:
        """Gradients of the sum of `losses` as grads_and_vars; records each loss.

        Values of `losses` are scalar tensors or StartPoint(tensor,
        output_gradients). Costs one backward pass on steps that are not
        recorded; on recorded steps, one more per loss (if more than one).
        """
        variables = losses_lib.check_gradients_call(tape, losses, variables)
        grads = gradients_lib.total_gradients(tape, losses, variables)
        self._r.per_loss(tape, losses, variables, grads, ExecutionContext.current())
        return list(zip(grads, variables))

    @_no_autograph
    def apply(self, optimizer: Any, grads_and_vars: Any) -> Any:
        """`optimizer.apply_gradients(grads_and_vars)`, observed; advances `step`.

        At recorded steps also records ||delta theta|| and ||theta|| per scope
        (a transient copy of the variables handed over, taken only then;
        recorded variables not handed over cannot move: their update is 0).
        Returns what apply_gradients returns.
        """
        pairs = losses_lib.check_pairs("apply", grads_and_vars)
        if self._loss_scale is None:
            loss_scale_lib.warn_if_unscaled(optimizer, (id(self), "loss_scale"), self.name)
        ctx = ExecutionContext.current()
        inner = getattr(optimizer, "inner_optimizer", optimizer)
        build_outside_trace(inner, [v for _, v in pairs], ctx)
        return self._r.apply(optimizer, pairs, ctx)

    @contextlib.contextmanager
    def training_step(self) -> Iterator[None]:
        """One recorded training step, however many tapes, optimizers or
        `tf.function`s it is made of (DDPG, TD3, SAC, GANs, BYOL).

        Every `apply` inside the block leaves `step` alone; leaving the block
        advances it once, so every loss of the step is recorded at the same
        steps. ||delta theta|| covers the whole block for every recorded
        variable, whichever optimizer moved it. Use it inside one
        `tf.function`, or eagerly around several (`update_critic(b);
        update_actor(b)`): a function traced inside the block must then always
        be called inside one. An exception inside the block leaves `step` as it
        was. DDPG::

          @tf.function
          def train_step(s, a, r, s2):
              with rec.training_step():
                  with rec.tape() as tape:
                      critic_loss = ...
                  rec.apply(critic_opt, rec.gradients(tape, {"critic": critic_loss}, critic_vars))
                  with rec.tape() as tape:
                      actor_loss = ...
                  rec.apply(actor_opt, rec.gradients(tape, {"actor": actor_loss}, actor_vars))
                  polyak(target, online)
                  rec.record_drift()
        """
        if self._s.block is not None:
            raise ValueError(
                f"Recorder '{self.name}': training_step() blocks do not nest; "
                "open one block per training step"
            )
        ctx = ExecutionContext.current()  # the block's exit runs where its entry did
        block = Block.open(ctx)
        self._s.block = block
        try:
            self._r.enter_block(block, ctx)
            yield
        finally:
            self._s.block = None
        self._r.end_block(block, ctx)

    def function(self, fn: Callable[..., Any] | None = None, **tf_function_kwargs: Any) -> Any:
        """`tf.function(fn)` whose unrecorded steps run the plain step (recommended).

        A decorator, with or without `tf.function`'s arguments::

          @rec.function                    # or @rec.function(jit_compile=True)
          def train_step(s, a, r, s2):
              with rec.tape() as tape:
                  ...
              rec.apply(optimizer, rec.gradients(tape, losses, variables))
              rec.record_drift()

        `fn` is traced twice: as a plain `tf.function` would be, but knowing
        the step is recorded (run at recorded steps, which record exactly as
        they do there, without the in-graph gates: gradient stats, the update
        and the pairs' drift, compared with the pairs' values read at the
        start of the same call, in one call per recording period), and with
        every recorder call passing through (run at every other step: no
        recording op at all, `gradients` is `tape.gradient` of the losses'
        sum, `apply` is `apply_gradients` and the step's advance). The host
        picks by step, counted on the host from the advances each variant's
        trace saw (`step` is read only before a call that records, or when
        the count may be wrong: see `tb_gradscope.record._step_function`).
        """
        if fn is None:
            return lambda f: StepFunction(self, f, tf_function_kwargs)
        return StepFunction(self, fn, tf_function_kwargs)

    def watch(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        losses: Mapping[str, str] | None = None,
        eager: bool = False,
        **tf_function_kwargs: Any,
    ) -> Any:
        """Records a training step as written: one call of `fn` is one step.

        A decorator, in place of `@tf.function` or above it, with or without
        arguments; `eager=True` keeps an eager step eager::

          @rec.watch                       # or @rec.watch(losses={"loss": "td"})
          def train_step(s, a, r, s2):
              ...                          # tapes, tape.gradient, apply_gradients as usual

        At recorded steps every `GradientTape.gradient` call with variables
        among its sources is a loss, named after the variable the code holds
        its target in (`critic_loss`; else `loss_<i>`; `losses=` renames),
        its gradients recorded as the step computed them; every Keras optimizer
        `apply_gradients`/`apply` runs through `apply` (the same values), so
        the analysis says which loss each optimizer trains; the pairs are read
        at the call's start and end and their drift labelled with the step.
        Every other call runs `fn` as written, plus the counter's advance (as
        `function`'s plain variant). A step with no tape gradient to see warns
        once, naming the explicit API, and keeps training. See `_watch.py`.
        """
        if fn is None:
            return lambda f: Watch(self, f, losses, eager, tf_function_kwargs)
        return Watch(self, fn, losses, eager, tf_function_kwargs)

    def due_at(self, step: int) -> str:
        """The variant a `Recorder.function` step starting at `step` runs:
        "recorded" (gradient stats, the update and the pairs' drift are due:
        `step` is a multiple of `every_n_steps`) or "plain" (nothing is)."""
        return variant_due(self._s, step)

    @_no_autograph
    def advance(self) -> None:
        """Advances `step` without applying (for loops that apply themselves).

        Traced after the user's own optimizer step, it is also where that step's
        graph is analyzed (as `apply` does).
        """
        self._r.advance(ExecutionContext.current())

    @_no_autograph
    def record_drift(self) -> None:
        """Records the drift of `pairs` in the steps that record gradients,
        labelled with their step (0, 10, 20, ... at `every_n_steps=10`, also
        after `apply` has advanced `step`): call once per training step, after
        the target update (class docstring)."""
        self._r.record_drift(ExecutionContext.current())

    # ----- XLA: compute inside, write outside ------------------------------

    @_no_autograph
    def stats(self) -> Stats:
        """All stats computed so far in this XLA-compiled trace, to return from it."""
        return self._s.emitter.take_deferred(self.step.read_value(), ExecutionContext.current())

    @_no_autograph
    def write(self, *all_stats: Stats | None) -> None:
        """Writes Stats returned from a `jit_compile=True` step (outside XLA)."""
        self._r.write(all_stats, ExecutionContext.current())

    # ----- static analysis -------------------------------------------------

    def analyze(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FlowGraph | None:
        """Traces an eager step function `fn(*args)` once, without running it,
        to analyze it statically (an eager loop otherwise has no FlowGraph:
        blocked and independent, updates and ignored cannot be told apart).

        `fn` must call this recorder's `apply` (inside `training_step()` if the
        loop uses it), before the loop or at any step: Keras 3 optimizers build
        their state outside the trace, as their first apply would. The
        FlowGraph found is written and returned (None if analysis is missing or
        failed, after a warning).
        """
        return self._trace(fn, "analyze", getattr(fn, "__name__", fn), *args, **kwargs)

    def _trace(
        self, fn: Callable[..., Any], method: str, label: Any, *args: Any, **kwargs: Any
    ) -> FlowGraph | None:
        """Traces `fn(*args)` once without running it; warns, naming `label`, if it cannot."""
        try:
            tf.function(fn).get_concrete_function(*args, **kwargs)
        except Exception as e:  # noqa: BLE001 - a failed trace must not stop training
            warn_once(
                (id(self), "analyze_failed"),
                f"Recorder '{self.name}'.{method} could not trace {label!r} "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); the step still "
                "runs, without a FlowGraph (trace it in tf.function to get one)",
            )
        return self.flowgraph

    def analyze_losses(
        self,
        losses_fn: Callable[..., Mapping[str, Any]],
        optimizer: Any,
        variables: Sequence[Any] | Mapping[str, Sequence[Any]],
        *args: Any,
    ) -> FlowGraph | None:
        """`analyze` for a step whose tape cannot be traced, such as one tape
        around an environment rollout: traces, without running it, your own
        `losses_fn(*args) -> {name: loss}` in a tape whose summed gradient
        `optimizer` applies to `variables`, as the step does.

        With one optimizer per loss (an actor-critic's `actor_opt` and
        `critic_opt` fed from one tape), pass `optimizer` and `variables` as
        {loss name: ...} with the keys `losses_fn` returns: each loss's
        optimizer applies its gradient to its variables, in the mapping's
        order, in one `training_step()` (the block the loop's applies need).

        `args` are the rollout's stacked tensors (or `tf.TensorSpec`s of them)
        and `losses_fn` computes the losses from them, so the blocked edges'
        source lines are your loss code's. Same rules as `analyze`; mappings
        that do not match raise ValueError.
        """
        split = losses_lib.check_split_optimizers(optimizer, variables)
        refused: list[str] = []

        def step(*stacked: Any) -> None:
            with self.tape() as tape:
                named = losses_fn(*stacked)
            if split is None:
                self.apply(optimizer, self.gradients(tape, named, variables))
                return
            mismatch = losses_lib.split_mismatch(split, named)
            if mismatch:
                refused.append(mismatch)
                return
            block = self.training_step() if self._s.block is None else contextlib.nullcontext()
            with block:
                for name, (opt, its_variables) in split.items():
                    self.apply(opt, self.gradients(tape, {name: named[name]}, its_variables))

        label = getattr(losses_fn, "__name__", losses_fn)
        graph = self._trace(step, "analyze_losses", label, *args)
        if refused:
            raise ValueError(refused[0])
        return graph

    @property
    def flowgraph(self) -> FlowGraph | None:
        """The FlowGraph of the first analyzed step, if any."""
        return self._s.emitter.flowgraph

    @property
    def violations(self) -> list:
        """Every rule violation (tb_gradscope.format.Event) seen so far."""
        return list(self._s.checks.violations) if self._s.checks is not None else []

    @property
    def pairs(self) -> list:
        """The target/online pairs whose drift is recorded."""
        return self._s.monitor.pairs if self._s.monitor is not None else []

    @property
    def layout(self) -> naming.VariableLayout | None:
        """The recorded variables and scope tree, once known."""
        return self._s.layout.vlayout

    def flush(self) -> None:
        """Flushes the writer; warns if the event file vanished or stats went unwritten."""
        self._r.flush()

    def close(self) -> None:
        """Flushes and closes the recorder's own writer."""
        self.flush()
        self._s.emitter.sink.close()
