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
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator, Mapping, Sequence

import tensorflow as tf

from tb_gradscope.format.flowgraph import FlowGraph
from tb_gradscope.format.metadata import Kind
from tb_gradscope.record import flow, losses as losses_lib, naming, stats
from tb_gradscope.record.emit import Emitter, Stats, graph_key
from tb_gradscope.record.layout import LayoutResolver
from tb_gradscope.record.losses import StartPoint
from tb_gradscope.record.reductions import in_xla
from tb_gradscope.record.warn import warn_once
from tb_gradscope.record.writing import NoWriterError, SummarySink
from tb_gradscope.scopes import ScopeSpec

# Our code builds its own control flow (tf.cond); autograph must not rewrite it
# when a user's tf.function calls into the recorder.
_no_autograph = tf.autograph.experimental.do_not_convert
_in_xla = in_xla


class _State:
    """Everything but the step counter: deliberately invisible to checkpoints."""

    def __init__(self, emitter: Emitter, layout: LayoutResolver, every: int):
        self.emitter = emitter
        self.layout = layout
        self.every = every
        self.pending_losses: dict[int, dict] = {}
        self.disabled = False


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
    ):
        super().__init__(name=name)
        if isinstance(every_n_steps, bool) or not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(
                f"every_n_steps must be an int >= 1, got {every_n_steps!r}; "
                "e.g. every_n_steps=10 records steps 0, 10, 20, ..."
            )
        if scopes is not None and not isinstance(scopes, ScopeSpec):
            raise ValueError(
                f"scopes must be a tb_gradscope.scopes.ScopeSpec, got {type(scopes).__name__}"
            )
        explicit = None
        if variables is not None:
            explicit = losses_lib.check_variables(variables, "Recorder(variables=...)")
        roots = naming.model_roots(models)
        with tf.init_scope():
            self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
        self._s = _State(
            Emitter(SummarySink(logdir, name), name, every_n_steps),
            LayoutResolver(name, roots, explicit, scopes),
            every_n_steps,
        )

    # ----- the two ways in -------------------------------------------------

    @_no_autograph
    def record_gradients(
        self,
        grads_by_loss: Mapping[str, Any],
        losses: Mapping[str, Any] | None = None,
    ) -> Stats | None:
        """Records gradients the user computed: {loss_name: grads_and_vars}.

        `losses` optionally maps loss names to their tensors (or StartPoint)
        for static analysis. Inside `jit_compile=True` returns the Stats to
        hand to `write` outside; otherwise writes and returns None.
        """
        losses_lib.check_loss_names(grads_by_loss, "record_gradients")
        pairs_by_loss = {
            name: losses_lib.check_pairs(name, gv) for name, gv in grads_by_loss.items()
        }
        if losses is not None:
            losses_lib.check_loss_names(losses, "record_gradients(losses=...)")
            for name, value in losses.items():
                losses_lib.check_loss(name, value)
        if self._s.disabled:
            return None
        with self._guard():
            seen = [v for pairs in pairs_by_loss.values() for _, v in pairs]
            if not self._s.layout.ensure(seen):
                return None
            self._stash_losses(losses or {})
            makers = {
                name: self._grad_maker(name, [g for g, _ in pairs], [v for _, v in pairs])
                for name, pairs in pairs_by_loss.items()
            }
            return self._emit(Kind.GRAD_STATS, makers)
        return None

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
        losses_lib.check_loss_names(losses, "gradients")
        for name, value in losses.items():
            losses_lib.check_loss(name, value)
        variables = losses_lib.check_variables(variables, "gradients")
        if len(losses) > 1 and not getattr(tape, "_persistent", True):
            raise ValueError(
                "gradients needs a persistent tape to compute each loss's gradients: "
                "use `with rec.tape() as tape:` or tf.GradientTape(persistent=True)"
            )
        grads = self._total_gradients(tape, losses, variables)
        if variables and all(g is None for g in grads):
            warn_once(
                (id(self), "no_gradient", tuple(losses)),
                f"Recorder '{self.name}': no variable gets a gradient from losses "
                f"{sorted(losses)}; compute them inside `with rec.tape() as tape:` "
                "(ops after the block are not recorded) from the variables passed",
            )
        if not self._s.disabled:
            with self._guard():
                if self._s.layout.ensure(variables):
                    self._stash_losses(losses)
                    self._emit(Kind.GRAD_STATS, self._loss_makers(tape, losses, variables, grads))
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
        before = None
        if not self._s.disabled:
            with self._guard():
                if self._s.layout.ensure([v for _, v in pairs]):
                    before = self._snapshot_if_recording(pairs)
        result = optimizer.apply_gradients(pairs)
        if before is not None and not self._s.disabled:
            with self._guard():
                self._analyze_traced_step()
                variables, rollup = self._s.layout.vlayout.variables, self._s.layout.rollup
                maker = lambda: stats.update_table(before, variables, rollup)  # noqa: E731
                self._emit(Kind.UPDATE_STATS, {"": maker})
        self.advance()
        return result

    @_no_autograph
    def advance(self) -> None:
        """Advances `step` without applying (for loops that apply themselves).

        Traced after the user's own optimizer step, it is also where that step's
        graph is analyzed (as `apply` does).
        """
        if not self._s.disabled and self._s.layout.vlayout is not None:
            with self._guard():
                if self._analyze_traced_step() and not _in_xla():
                    self._s.emitter.write_flowgraph(self.step.read_value(), self._should_record())
        self.step.assign_add(1)

    # ----- XLA: compute inside, write outside ------------------------------

    @_no_autograph
    def stats(self) -> Stats:
        """All stats computed so far in this XLA-compiled trace, to return from it."""
        return self._s.emitter.take_deferred(self.step.read_value())

    @_no_autograph
    def write(self, *all_stats: Stats | None) -> None:
        """Writes Stats returned from a `jit_compile=True` step (outside XLA)."""
        if _in_xla():
            raise ValueError(
                "Recorder.write cannot run inside a jit_compile=True function "
                "(summaries are unsupported on XLA); return rec.stats() from the "
                "compiled step and call rec.write(...) on its result outside it"
            )
        for item in all_stats:
            if item is not None and not self._s.disabled:
                with self._guard():
                    self._s.emitter.write(item)

    # ----- static analysis -------------------------------------------------

    def analyze(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> FlowGraph | None:
        """Traces an eager step function `fn(*args)` to analyze it statically.

        `fn` must call this recorder's `apply`; the FlowGraph found is written
        at the next recorded step and returned (None if analysis is missing or
        failed, after a warning).
        """
        tf.function(fn).get_concrete_function(*args, **kwargs)
        return self.flowgraph

    @property
    def flowgraph(self) -> FlowGraph | None:
        """The FlowGraph of the first analyzed step, if any."""
        return self._s.emitter.flowgraph

    @property
    def layout(self) -> naming.VariableLayout | None:
        """The recorded variables and scope tree, once known."""
        return self._s.layout.vlayout

    def flush(self) -> None:
        """Flushes the writer; warns if the event file vanished or stats went unwritten."""
        emitter = self._s.emitter
        if emitter.deferred_made and not emitter.deferred_written:
            warn_once(
                (id(self), "unwritten"),
                f"Recorder '{self.name}' computed stats inside a jit_compile=True "
                "step but nothing wrote them: return rec.stats() from the step and "
                "call rec.write(result) after it",
            )
        emitter.sink.flush()

    def close(self) -> None:
        """Flushes and closes the recorder's own writer."""
        self.flush()
        self._s.emitter.sink.close()

    # ----- internals -------------------------------------------------------

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        """Turns an unexpected failure of recording into one warning, then steps aside."""
        try:
            yield
        except NoWriterError:
            raise
        except Exception as e:  # recording must never break the training loop
            self._s.disabled = True
            warn_once(
                (id(self), "internal"),
                f"Recorder '{self.name}' stopped recording after an error "
                f"({type(e).__name__}: {e}); training continues unaffected",
            )

    def _grad_maker(self, loss: str, grads: Sequence[Any], variables: Sequence[Any]) -> Callable:
        aligned = self._s.layout.aligned(loss, grads, variables)
        return lambda: stats.grad_table(aligned, self._s.layout.rollup)

    def _loss_makers(self, tape, losses, variables, total_grads) -> dict[str, Callable]:
        if len(losses) == 1:
            (name,) = losses
            return {name: self._grad_maker(name, total_grads, variables)}
        makers = {}
        for name, value in losses.items():
            target, seed = losses_lib.target_and_seed(value)

            def make(name=name, target=target, seed=seed):
                grads = tape.gradient(target, variables, output_gradients=seed)
                aligned = self._s.layout.aligned(name, grads, variables)
                return stats.grad_table(aligned, self._s.layout.rollup)

            makers[name] = make
        return makers

    def _total_gradients(self, tape, losses, variables) -> list[Any]:
        targets, seeds = zip(*(losses_lib.target_and_seed(v) for v in losses.values()))
        if any(isinstance(v, StartPoint) for v in losses.values()):
            seeds = [tf.ones_like(t) if s is None else s for t, s in zip(targets, seeds)]
            return tape.gradient(list(targets), variables, output_gradients=seeds)
        if len(targets) == 1:
            return tape.gradient(targets[0], variables)
        recording = getattr(tape, "_recording", False)
        with contextlib.nullcontext() if recording else tape:
            total = tf.add_n(list(targets))
        return tape.gradient(total, variables)

    def _should_record(self) -> tf.Tensor:
        return tf.equal(tf.math.floormod(self.step.read_value(), self._s.every), 0)

    def _snapshot_if_recording(self, pairs: Sequence[tuple[Any, Any]]) -> list[Any]:
        """Layout-aligned copies of the variables handed to the optimizer, taken
        only at recorded steps; None for variables the step cannot write."""
        vlayout = self._s.layout.vlayout
        handed = sorted({i for _, v in pairs if (i := vlayout.index_of(v)) is not None})
        variables = [vlayout.variables[i] for i in handed]
        record = self._should_record()
        if _in_xla():  # XLA needs equal shapes on both branches
            empty = lambda: [tf.zeros_like(tf.convert_to_tensor(v)) for v in variables]  # noqa: E731
        else:
            empty = lambda: [tf.zeros([0], v.dtype) for v in variables]  # noqa: E731
        copies = tf.cond(record, lambda: stats.snapshot(variables), empty) if variables else []
        before: list[Any] = [None] * len(vlayout.variables)
        for i, copy in zip(handed, copies):
            before[i] = copy
        return before

    def _emit(self, kind: Kind, makers: Mapping[str, Callable]) -> Stats | None:
        scopes = self._s.layout.vlayout.layout.scopes
        return self._s.emitter.emit(
            kind, makers, scopes, self.step.read_value(), self._should_record()
        )

    def _stash_losses(self, losses: Mapping[str, Any]) -> None:
        if not tf.executing_eagerly() and losses:
            self._s.pending_losses.setdefault(graph_key(), {}).update(losses)

    def _analyze_traced_step(self) -> bool:
        """At trace time, after the optimizer: analyze this graph (once per recorder).

        Returns True when this call found the recorder's FlowGraph.
        """
        if tf.executing_eagerly():
            return False
        graph_losses = self._s.pending_losses.pop(graph_key(), {})
        emitter = self._s.emitter
        if emitter.flowgraph is not None or not graph_losses:
            return False
        vlayout = self._s.layout.vlayout
        emitter.flowgraph = flow.analyze_step(
            tf.compat.v1.get_default_graph(),
            graph_losses,
            vlayout.variable_scopes(),
            vlayout.layout.scopes,
            self.name,
        )
        return emitter.flowgraph is not None
