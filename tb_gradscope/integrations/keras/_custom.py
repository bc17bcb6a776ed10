"""The losses of a custom `train_step` (GANs, two optimizers), as it differentiates them.

A model that overrides `train_step` computes its losses outside Keras's
CompileLoss and often trains them with optimizers other than
`model.optimizer` (a GAN's `d_optimizer` and `g_optimizer`). While such a step
is traced, every `GradientTape.gradient` call it makes is seen (the call itself
is unchanged; `record/_tape_calls.py`, shared with `Recorder.watch`): its target is one of the step's losses and its tape's watched
variables say where that loss's gradient can go (a network run before the tape
opened cannot get any). Calls made from one place (the same Python stack: a
loop of WGAN critic steps) are one loss, taken at its first call. A loss is
named after the key of the logs the step returns when that holds one of its
tensors, else after the metric one of them updates
(`keras.metrics.Mean(name="d_loss").update_state(d_loss)`), else `loss_<i>`.
A loss that is not a scalar (a per-sample vector) is recorded as its sum,
whose gradient is what `tape.gradient` computes for it (`TapedLoss.shape`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import tensorflow as tf

from tb_gradscope.record import _tape_calls as tape_calls
from tb_gradscope.record._tape_calls import TapeCalls, TapedLoss


class CustomStep(TapeCalls):
    """What one traced custom step differentiated and which metrics it fed."""

    def __init__(self) -> None:
        super().__init__()
        self.metric_inputs: dict[int, str] = {}  # id(tensor) -> metric name

    def seen(self, taped: TapedLoss) -> None:
        target = taped.target
        if taped.output_gradients is not None or taped.tape is None:
            return  # a start point, or tf.gradients (no tape to say what it watched)
        if target.shape.rank == 0:
            self.taped.append(taped)
        elif (
            target.shape.rank is not None
            and target.dtype.is_floating
            and _has_variables(taped.sources)  # not a gradient w.r.t. inputs (a gradient penalty's)
        ):
            # tape.gradient of a vector is the gradient of its sum: record that.
            shape = tuple(target.shape.as_list())
            summed = tf.reduce_sum(target)
            self.taped.append(dataclasses.replace(taped, target=summed, shape=shape, given=target))

    def named(self, logs: Any) -> dict[str, TapedLoss]:
        """{loss name: TapedLoss}, named by the step's logs or the metric each feeds."""
        by_logs = {id(v): str(k) for k, v in logs.items()} if isinstance(logs, dict) else {}
        calls_by_site: dict[tuple, list[TapedLoss]] = {}
        for taped in self.taped:
            calls_by_site.setdefault(taped.site, []).append(taped)
        named: dict[str, TapedLoss] = {}
        for i, calls in enumerate(calls_by_site.values()):
            names = (by_logs.get(c.named_by) or self.metric_inputs.get(c.named_by) for c in calls)
            name = next((n for n in names if n), f"loss_{i}")
            while name in named:
                name += "_"
            named[name] = calls[0]
        return named


def _has_variables(sources: Any) -> bool:
    """Whether `sources` holds variables (what a loss is differentiated for),
    not only tensors (a gradient penalty's inputs)."""
    return any(hasattr(s, "assign") and hasattr(s, "trainable") for s in tf.nest.flatten(sources))


def overrides_train_step(model: Any, base_types: tuple[type, ...]) -> bool:
    """Whether the model's class defines its own `train_step`."""
    own = getattr(type(model), "train_step", None)
    return not any(own is getattr(base, "train_step", None) for base in base_types)


@contextlib.contextmanager
def observe(model: Any) -> Iterator[CustomStep]:
    """While open, this thread's `GradientTape.gradient` calls and the inputs of
    the model's metrics' `update_state` land in the yielded CustomStep."""
    step = CustomStep()
    patched = _observe_metrics(model, step)
    try:
        with tape_calls.observe(step):
            yield step
    finally:
        for metric in patched:
            metric.__dict__.pop("update_state", None)


def _observe_metrics(model: Any, step: CustomStep) -> list[Any]:
    patched = []
    try:
        metrics = list(model.metrics)
    except Exception:  # noqa: BLE001 - a model whose metrics cannot be listed yet
        return patched
    for metric in metrics:
        update = getattr(metric, "update_state", None)
        if update is None or "update_state" in metric.__dict__:
            continue

        def observed(
            *args: Any, _update: Any = update, _name: str = str(metric.name), **kwargs: Any
        ) -> Any:
            if args and tf.is_tensor(args[0]):
                step.metric_inputs.setdefault(id(args[0]), _name)
            return _update(*args, **kwargs)

        metric.__dict__["update_state"] = observed
        patched.append(metric)
    return patched
