"""`Recorder.watch(fn)`: a training step recorded as the user wrote it.

One call of the watched function is one training step. At a recorded step the
call runs inside one `training_step()` block, and what the step does is
handed to the recorder as it happens, with no line of the step changed:

- every `GradientTape.gradient` call with variables among its sources
  (`_tape_calls.py`, shared with the Keras callback) is a loss: its gradients
  are recorded as `record_gradients` records them (the very tensors the step
  applies: no extra backward pass). It is named by the call site, after the
  local variable the calling code holds the target in (`critic_loss`), else
  `loss_<i>`; `losses=` renames. Calls from one place (a loop) are one loss,
  taken at its first call. `losses=` may also split a summed loss into its
  terms (`{"loss": ["actor_loss", "critic_loss"]}`: the local names the code
  holds them under where it calls `tape.gradient`): each term is then a loss of
  its own, differentiated on the same tape (made persistent for the call,
  `_tape_calls.py`), as `Recorder.gradients` with both terms records them;
- every Keras optimizer apply (`apply_gradients` or `apply`,
  `_optimizer_calls.py`) goes through `Recorder.apply`, which applies the same
  gradients to the same variables: the traced step's analysis then says which
  loss's gradient each optimizer consumes;
- the pairs are read at the start of the call and after it (`record_drift`
  after the block), so drift is the step's, labelled with its number.

A traced step (the default, `@rec.watch` on a Python function or on a
`tf.function`) is a `Recorder.function` (`_step_function.py`): traced twice,
the recorded variant above at recorded steps and, at every other step, the
user's function as written plus the counter's advance, picked on the host.
`eager=True` runs the function eagerly: the host reads the counter and picks
the same way; `rec.analyze(step, *batch)` traces its recorded form once for
the FlowGraph an eager loop otherwise lacks. A loss a call does not compute (a delayed actor) is
absent from that call's records; traced, it is recorded late as the explicit
form records it, at its first computation at or after each recording step
(`_step_function.py`, `LATE`: the plain trace names the losses it computes,
`_Named`, so that one computed only off the recording steps is known). A step
in which no tape gradient is seen says so once, naming the explicit API, and
keeps training.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.core.warn import warn_once
from tb_gradscope.record import _optimizer_calls as optimizer_calls
from tb_gradscope.record import _tape_calls as tape_calls
from tb_gradscope.record._context import ExecutionContext
from tb_gradscope.record._losses import StartPoint, check_pairs
from tb_gradscope.record._step_function import PLAIN, StepFunction, variant_due
from tb_gradscope.record._tape_calls import TapeCalls, TapedLoss

_EXPLICIT = (
    "use the explicit API instead: rec.record_gradients({'name': grads_and_vars}, "
    "losses={'name': loss}) or rec.gradients(tape, {'name': loss}, variables), and "
    "rec.apply(optimizer, grads_and_vars), in a rec.function (docs/RECORDER.md)"
)


class Watch:
    """A step function whose calls are training steps, recorded as written.

    Made by `Recorder.watch(fn, losses=..., eager=..., **tf_function_kwargs)`;
    call it as `fn`.
    """

    def __init__(
        self,
        recorder: Any,
        fn: Callable[..., Any],
        losses: Mapping[str, str] | None,
        eager: bool,
        tf_function_kwargs: dict,
    ):
        options = private.tf_function_options(fn)
        inner = fn.python_function if options is not None else fn
        kwargs = {**(options or {}), **tf_function_kwargs}
        if kwargs.get("jit_compile"):
            raise ValueError(
                f"Recorder '{recorder.name}'.watch({getattr(inner, '__name__', inner)!r}): a "
                "jit_compile=True step cannot write summaries (XLA has no kernel for them); "
                "use rec.function(jit_compile=True) with rec.stats() and rec.write(...)"
            )
        self.recorder = recorder
        self._fn = inner
        self._renames, self._terms = _split_losses(recorder.name, losses or {})
        self.label = getattr(inner, "__name__", "step")
        self._step: StepFunction | None = None
        if not eager:

            def body(*args: Any, **kw: Any) -> Any:
                return self._body(args, kw)

            functools.update_wrapper(body, inner)
            self._step = StepFunction(recorder, body, kwargs, late=True)
        functools.update_wrapper(self, inner)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._step is not None:
            return self._step(*args, **kwargs)
        recorder = self.recorder
        state = recorder._s  # noqa: SLF001
        if not tf.executing_eagerly():  # traced by `rec.analyze`: the step as it records
            return self._recorded(args, kwargs)
        if state.disabled or variant_due(state, int(recorder.step.numpy())) == PLAIN:
            return self._plain(args, kwargs)
        return self._recorded(args, kwargs)

    def _body(self, args: tuple, kwargs: dict) -> Any:
        """What each variant of a traced watched step traces."""
        state = self.recorder._s  # noqa: SLF001
        if state.variants.mode(ExecutionContext.current()) == PLAIN:
            return self._plain(args, kwargs)
        return self._recorded(args, kwargs)

    def _plain(self, args: tuple, kwargs: dict) -> Any:
        """The user's step as written, then the step's advance. Traced, the
        losses it computes are made due (`_Named`: no op added), so that one
        computed only off the recording steps is recorded late."""
        if tf.executing_eagerly():
            out = self._fn(*args, **kwargs)
        else:
            with tape_calls.observe(_Named(self)):
                out = self._fn(*args, **kwargs)
        recorder = self.recorder
        recorder.step.assign_add(1)
        recorder._s.advanced(ExecutionContext.current())  # noqa: SLF001
        return out

    def _recorded(self, args: tuple, kwargs: dict) -> Any:
        """The step in one `training_step()` block, its tapes and applies observed."""
        recorder = self.recorder
        seen = _Seen(self)
        if tf.executing_eagerly():  # the block's entry copies the variables: know them
            recorder._s.layout.ensure_given()  # noqa: SLF001
        with tape_calls.observe(seen), optimizer_calls.observe(seen.apply):
            with recorder.training_step():
                out = self._fn(*args, **kwargs)
        recorder.record_drift()
        seen.done()
        return out

    def terms_of(self, called_as: str | None) -> tuple[str, ...]:
        """The terms `losses=` splits the loss held as `called_as` into, or ()."""
        return self._terms.get(called_as, ()) if called_as is not None else ()

    @property
    def has_terms(self) -> bool:
        return bool(self._terms)

    def name_for(self, found: str | None, taken: Sequence[str]) -> str:
        """A loss's name: `losses=`'s for its call site's name `found`, else that
        name (`critic_loss`), else `loss_<i>`; a name `taken` gets `_<k>`."""
        found = found or f"loss_{len(taken)}"
        name = self._renames.get(found, found)
        used = set(taken)
        base, k = name, 1
        while name in used:
            name, k = f"{base}_{k}", k + 1
        return name


class _Named(TapeCalls):
    """The losses a plain trace of a watched step computes, named as `_Seen`
    names them, each made due (`RecorderState.expect_loss`); nothing recorded."""

    def __init__(self, watch: Watch):
        super().__init__()
        self._watch = watch
        self._sites: set[tuple] = set()
        self._names: list[str] = []

    def seen(self, taped: TapedLoss) -> None:
        if ExecutionContext.current().distributed:
            return  # tf.distribute keeps the period alone: nothing is recorded late
        sources = tf.nest.flatten(taped.sources)
        if not any(_is_variable(v) for v in sources) or taped.site in self._sites:
            return
        self._sites.add(taped.site)
        for found in self._watch.terms_of(taped.called_as) or (taped.called_as,):
            name = self._watch.name_for(found, self._names)
            self._names.append(name)
            self._watch.recorder._s.expect_loss(name)  # noqa: SLF001


class _Seen(TapeCalls):
    """What one recorded call of a watched step differentiated and applied."""

    def __init__(self, watch: Watch):
        super().__init__()
        self._watch = watch
        self.recorder = watch.recorder
        self._sites: set[tuple] = set()  # the call sites seen
        self._names: list[str] = []  # the loss names taken
        self._applied = 0
        self._busy = False  # the recorder itself is at work: its own calls are not the step's

    def terms_of(self, called_as: str | None) -> tuple[str, ...]:
        return () if self._busy else self._watch.terms_of(called_as)

    @property
    def wants_terms(self) -> bool:
        return self._watch.has_terms and not self._busy

    def seen(self, taped: TapedLoss) -> None:
        if self._busy:
            return
        sources = tf.nest.flatten(taped.sources)
        if not any(_is_variable(v) for v in sources) or taped.site in self._sites:
            return  # a gradient of inputs (a penalty's), or a loop's later call
        if taped.terms_missing:
            self._warn(
                "terms",
                f"losses= splits '{taped.called_as}' into terms, but {taped.terms_missing}: "
                f"it is recorded as one loss",
            )
        if taped.terms:
            parts = [(found, term, None, grads) for found, (term, grads) in taped.terms.items()]
        else:
            parts = [(taped.called_as, taped.target, taped.output_gradients, taped.grads)]
        self._sites.add(taped.site)
        grads_by_loss, losses = {}, {}
        for found, target, seeds, grads in parts:  # one call: the terms' conflict too
            name = self._watch.name_for(found, self._names)
            self._names.append(name)
            flat = tf.nest.flatten(grads)
            grads_by_loss[name] = [(g, v) for g, v in zip(flat, sources) if _is_variable(v)]
            scalar = seeds is None and target.shape.rank == 0
            losses[name] = target if scalar else StartPoint(target, seeds)
        self._busy = True
        try:
            self.recorder.record_gradients(grads_by_loss, losses=losses, tape=taped.tape)
        except ValueError as e:
            self._warn("loss", f"its loss {', '.join(map(repr, losses))} cannot be recorded ({e})")
        finally:
            self._busy = False

    def apply(self, optimizer: Any, grads_and_vars: list) -> None:
        """An optimizer apply of the step: through `Recorder.apply` (same values)."""
        self._applied += 1
        self._busy = True
        try:
            try:
                check_pairs("apply", grads_and_vars)
            except ValueError as e:
                self._warn("apply", f"an optimizer apply cannot be observed ({e})")
                optimizer.apply_gradients(grads_and_vars)
                return
            self.recorder.apply(optimizer, grads_and_vars)
        finally:
            self._busy = False

    def done(self) -> None:
        """After the call: says so once if nothing in it could be recorded as a loss."""
        if self._sites:
            return
        where = (
            "its optimizers got gradients from elsewhere"
            if self._applied
            else "it applies no gradient either"
        )
        self._warn(
            "no_tape",
            "it made no GradientTape.gradient call with variables among the sources "
            f"({where}), so no loss is recorded, only the step's counter and update",
        )

    def _warn(self, key: str, what: str) -> None:
        recorder = self.recorder
        warn_once(
            (id(recorder), "watch", key, self._watch.label),
            f"Recorder '{recorder.name}'.watch({self._watch.label!r}): {what}; "
            f"{_EXPLICIT}. Training continues as written",
        )


def _is_variable(value: Any) -> bool:
    return hasattr(value, "dtype") and hasattr(value, "assign")


def _split_losses(
    recorder: str, losses: Mapping[str, Any]
) -> tuple[dict[str, str], dict[str, tuple[str, ...]]]:
    """`losses=` as (renames {name in the code: loss name}, terms {name in the
    code: the names of its terms}); anything else is an error naming it."""
    renames, terms = {}, {}
    for found, value in losses.items():
        if isinstance(value, str):
            renames[found] = value
        elif isinstance(value, (list, tuple)) and value and all(isinstance(t, str) for t in value):
            terms[found] = tuple(value)
        else:
            raise ValueError(
                f"Recorder '{recorder}'.watch(losses=...): the value for {found!r} is {value!r}; "
                "give a loss name (a str) or the names of its terms (a list of str)"
            )
    return renames, terms
