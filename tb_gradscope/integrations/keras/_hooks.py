"""The hooks of GradscopeCallback, shared by the Keras 3 and tf_keras callbacks.

`GradscopeHooks` is a mixin: the public classes put it before their Keras's
`Callback` base (`keras.callbacks.Callback` or `tf_keras.callbacks.Callback`),
which differ only in where the model and loss container live (see
`capture.py`) and in how `steps_per_execution` is stored.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Sequence
from typing import Any

from tb_gradscope import _naming as naming
from tb_gradscope import _tf_private as private
from tb_gradscope.core.pairs import Pair
from tb_gradscope.core.warn import warn_once
from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS
from tb_gradscope.integrations.keras._custom import overrides_train_step
from tb_gradscope.integrations.keras._functions import TrainFunctions
from tb_gradscope.integrations.keras._records import KerasRecords
from tb_gradscope.integrations.keras._step import StepProbe
from tb_gradscope.record import _options as options
from tb_gradscope.record._drift_monitor import DriftMonitor
from tb_gradscope.record._writing import SummarySink
from tb_gradscope.rules import FlowRuleViolation, Rule, RuleChecker, apply_policy
from tb_gradscope.rules.policy import LOG
from tb_gradscope.scopes import ScopeSpec

_SERIALS = itertools.count()  # warn_once keys: a dead callback's id() may be reused


class GradscopeHooks:
    """Keras callback hooks recording gradient flow; see GradscopeCallback for
    the arguments (its constructor is this one, written once)."""

    # The Keras model class the callback accepts, and what to say otherwise.
    model_types: tuple[type, ...] = ()
    model_hint = ""
    # Whether unrecorded batches may run a plain train function picked on the
    # host (`functions.py`): Keras 3 binds the step when it makes the function.
    host_schedule = False

    @staticmethod
    def check_environment() -> None:
        """Raises when this Keras cannot be recorded (GradscopeCallback: a
        backend other than TensorFlow)."""

    def __init__(
        self,
        logdir: str,
        every_n_batches: int = 10,
        scopes: ScopeSpec | None = None,
        rules: Sequence[Rule | str] = (),
        on_violation: str = LOG,
        pairs: Sequence[Pair] = (),
        grad_columns: Collection[str] = OPTIONAL_GRAD_COLUMNS,
        variables: Sequence[Any] = (),
    ):
        self.check_environment()
        super().__init__()
        options.check_every(every_n_batches, "every_n_batches", "batches")
        options.check_scopes(scopes)
        self.grad_columns = options.check_grad_columns(grad_columns)
        self.logdir = logdir
        self._checker = RuleChecker(rules, on_violation=LOG) if rules else None
        apply_policy([], on_violation)  # checks the policy's name now
        self.on_violation = on_violation
        self.pairs = list(pairs)
        if not all(isinstance(p, Pair) for p in self.pairs):
            raise ValueError(
                "pairs must be tb_gradscope.pairs.Pair objects, e.g. "
                "pairs=[pair_models(target_model, model, tau=0.005)]"
            )
        self.every_n_batches = every_n_batches
        self.scopes = scopes
        self.variables = list(variables)
        self.disabled = False
        self._serial = next(_SERIALS)
        self._probe: StepProbe | None = None
        self._functions: TrainFunctions | None = None
        self._records: KerasRecords | None = None
        self._drift: DriftMonitor | None = None
        self._epoch_base = 0
        self._drained_to = 0

    @property
    def probe(self) -> StepProbe | None:
        """The in-graph instrumentation, once attached to a model."""
        return self._probe

    # ----- Keras hooks -----------------------------------------------------

    def set_model(self, model: Any) -> None:
        super().set_model(model)
        self._guard(lambda: self._attach(model))

    def on_train_begin(self, logs: Any = None) -> None:
        if self._active():
            self._guard(self._begin)

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        if self._active():
            self._guard(self._read_step)

    def on_train_batch_begin(self, batch: int, logs: Any = None) -> None:
        if not self._active():
            if self._functions is not None:  # stopped after an error: run the model's own step
                self._functions.release()
            return
        current = self._epoch_base + batch
        if self._drift is not None and batch > 0:
            self._guard(lambda: self._record_drift(current - 1))
        if self._recorded_since_drain(current):
            self._guard(lambda: self._drain(expected=current))
            self._drained_to = current
        if self._functions is not None:
            self._functions.choose(current)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        if self._active():
            self._guard(self._end_epoch)

    def on_train_end(self, logs: Any = None) -> None:
        if self._probe is None:
            return
        if not self.disabled and self._records is not None:
            self._guard(self._final_drain)
            self._guard(self._records.flush)
        self._probe.switch(False)
        if self._functions is not None:
            self._functions.release()

    def detach(self) -> None:
        """Gives the model back its own train_step (the next fit retraces)."""
        model, probe = self.model, self._probe
        if model is not None and _probe_of(model) is probe and probe is not None:
            del model.train_step
            model.train_function = None

    # ----- internals -------------------------------------------------------

    def _active(self) -> bool:
        return self._probe is not None and not self.disabled

    def _attach(self, model: Any) -> None:
        _check_model(model, self.model_types, self.model_hint)
        if _probe_of(model) is self._probe and self._probe is not None:
            return  # already instrumented by this callback: keep the traced step
        if _probe_of(model) is not None:
            del model.train_step  # another GradscopeCallback's wrapper
        named = naming.model_variables(model.name, model) + self._extra_variables(model)
        vlayout = naming.build_variable_layout(named, self.scopes)
        if not vlayout.variables:
            raise ValueError(
                f"model '{model.name}' has no float variables to record (is it "
                "built? are the scopes' include/exclude too strict?)"
            )
        slots = StepProbe.slots_for(steps_per_execution(model), self.every_n_batches)
        self._probe = StepProbe(
            model,
            vlayout,
            self.every_n_batches,
            slots,
            model.name,
            self._fail,
            custom=overrides_train_step(model, self.model_types),
            grad_columns=self.grad_columns,
        )
        own_step = model.train_step
        model.train_step = self._probe.wrap(own_step)
        model.train_function = None  # compile the instrumented step
        probe = self._probe
        self._functions = (
            TrainFunctions(
                model,
                probe.plain(own_step),
                self.every_n_batches,
                one_function=lambda: not probe.traces or bool(probe.kernel_random),
            )
            if self.host_schedule and TrainFunctions.supported(model)
            else None
        )

    def _attrs(self, **extra: Any) -> dict[str, Any]:
        return {"every_n_steps": self.every_n_batches, "recorder": "keras", **extra}

    def _begin(self) -> None:
        if self._records is None:
            sink = SummarySink(self.logdir, "keras")
            self._records = KerasRecords(sink, self._attrs(), self._checker, self.on_violation)
            if self.pairs:
                self._drift = self._drift_monitor(sink)
        if self._drift is not None:  # the pairs as the first batch finds them
            self._drift.snapshot_before(self._probe.current_step())
        self._probe.switch(True)
        if self._functions is not None:
            self._functions.install(steps_per_execution(self.model))

    def _drift_monitor(self, sink: SummarySink) -> DriftMonitor:
        spe = steps_per_execution(self.model)
        if spe != 1:
            warn_once(
                ("keras_drift_spe", self._serial),
                f"GradscopeCallback: drift is read between batches, but "
                f"steps_per_execution={spe} runs {spe} batches per call; compile "
                "with steps_per_execution=1 to record pairs",
            )
        return DriftMonitor(
            self.pairs,
            every_n_steps=self.every_n_batches,
            step=self._probe.step_variable,
            optimizers=[self.model.optimizer],
            sink=sink,
        )

    def _read_step(self) -> None:
        step = self._probe.current_step()
        self._epoch_base = self._drained_to = step

    def _end_epoch(self) -> None:
        current = self._probe.current_step()
        if self._recorded_since_drain(current):
            self._drain()
            self._drained_to = current
        if self._drift is not None:
            self._record_drift(current - 1)
        self._records.flush()

    def _final_drain(self) -> None:
        if self._probe.scaled or self._recorded_since_drain(self._probe.current_step()):
            self._drain(final=True)

    def _recorded_since_drain(self, current: int) -> bool:
        """Whether a step in [drained_to, current) was due (the ring may hold it)."""
        every = self.every_n_batches
        return -(-self._drained_to // every) * every < current

    def _extra_variables(self, model: Any) -> list[tuple[Any, str]]:
        """`variables=`, named under the model (a raw tf.Variable by the layer
        holding it); the model's variables Keras does not track and
        `variables=` leaves out are said once: they have no row."""
        untracked = naming.untracked_variables(model.name, model)
        given = {naming.variable_key(v) for v in self.variables}
        left_out = [(v, n) for v, n in untracked if naming.variable_key(v) not in given]
        if left_out:
            listed = ", ".join(
                f"layer '{n.rsplit('/', 2)[-2]}' holds '{n.rsplit('/', 1)[-1]}'"
                for _, n in left_out
            )
            warn_once(
                ("keras_untracked", self._serial),
                f"GradscopeCallback: model '{model.name}': {listed}, a tf.Variable Keras "
                "does not track: fit's optimizer never trains it and it has no row. Create it "
                "with self.add_weight(...) to train it, or pass GradscopeCallback("
                "variables=[...]) to record it",
            )
        by_key = {naming.variable_key(v): n for v, n in untracked}
        named = naming.name_variables(self.variables, [(model.name, model)])
        return [
            (v, by_key.get(naming.variable_key(v)) or _under(model.name, name)) for v, name in named
        ]

    def _record_drift(self, step: int) -> None:
        """Drift after `step` (and after other callbacks' target updates); a
        step that neither records drift nor precedes one that does costs nothing."""
        if self._drift.due_at(step) or self._drift.due_at(step + 1):
            self._drift.record(step)
        if step % self.every_n_batches == 0:
            self._records.dirty = True

    def _drain(self, final: bool = False, expected: int | None = None) -> None:
        """Writes every recorded step the probe holds that was not written yet
        (`final`: training is over, so every skipped step is complete too).
        `expected`: the step the host counted, checked against the optimizer's."""
        probe = self._probe
        if not probe.captured and probe.traces:
            warn_once(
                ("keras_no_losses", self._serial),
                f"GradscopeCallback: the train step of model '{probe.name}' computed "
                "none of its compiled losses through Keras's CompileLoss and took no "
                "GradientTape.gradient of a scalar loss; only applied updates are recorded",
            )
        current = self._records.drain(probe, final)
        if expected is not None and self._functions is not None:
            self._functions.check(expected, current)

    def _guard(self, action: Any) -> Any:
        try:
            return action()
        except FlowRuleViolation:
            raise  # on_violation="raise": the user asked fit to stop
        except Exception as e:  # noqa: BLE001 - fit must survive us
            self._fail(e)
            return None

    def _fail(self, error: Exception) -> None:
        self.disabled = True
        if self._probe is not None:
            self._probe.switch(False)
        warn_once(
            ("keras_callback_failed", self._serial),
            f"GradscopeCallback stopped recording into '{self.logdir}' after an "
            f"error ({type(error).__name__}: {error}); training continues unaffected",
        )


def _under(root: str, name: str) -> str:
    """`name` under the model's root scope unless it is there already."""
    return name if name == root or name.startswith(root + "/") else f"{root}/{name}"


def _probe_of(model: Any) -> StepProbe | None:
    return getattr(model.__dict__.get("train_step"), "gradscope_probe", None)


def steps_per_execution(model: Any) -> int:
    """Batches per train-function call (Keras 3: an int; tf_keras: a variable)."""
    value = getattr(model, "steps_per_execution", None)
    if value is None:
        value = private.legacy_steps_per_execution(model)
    if hasattr(value, "numpy"):
        value = value.numpy()
    return int(value or 1)


def _check_model(model: Any, types: tuple[type, ...], hint: str) -> None:
    if not isinstance(model, types):
        raise ValueError(
            f"this callback records {' or '.join(t.__module__ + '.' + t.__name__ for t in types)} "
            f"models, got {type(model).__module__}.{type(model).__name__}; {hint}"
        )
    if getattr(model, "optimizer", None) is None:
        raise ValueError(
            f"model '{model.name}' is not compiled with an optimizer; call "
            "model.compile(optimizer=..., loss=...) before fit"
        )
