"""Stable-Baselines3 without a code change: `GradscopeCallback`.

    from tb_gradscope.torch.sb3 import GradscopeCallback
    model = SAC("MlpPolicy", "Pendulum-v1")
    model.learn(10_000, callback=GradscopeCallback("logs/sac"))

SB3 computes its losses and calls `backward()` and `optimizer.step()` inside
`algorithm.train()`, where no `rec.backward` can go. The callback reads the
algorithm's models, optimizers and target pairs (`_sb3_structure`), builds a
`Recorder` over them, and watches every backward of each `train()` call
(`rec.watch()`): each loss is named by SB3's own variable (`critic_loss`,
`actor_loss`, `ent_coef_loss`; DQN's and PPO's `loss`).

Imports `tb_gradscope.torch` before stable_baselines3: SB3's logger imports
`torch.utils.tensorboard`, which imports tensorflow when it is installed.
"""

from __future__ import annotations

import functools
import itertools
import os
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from tb_gradscope.core.warn import warn_once
from tb_gradscope.scopes import ScopeSpec
from tb_gradscope.torch import Recorder

try:
    from stable_baselines3.common.callbacks import BaseCallback
except ImportError as e:  # pragma: no cover - tested in a venv with SB3
    raise ImportError(
        "tb_gradscope.torch.sb3 needs Stable-Baselines3: pip install 'tb-gradscope[sb3]'"
    ) from e

from tb_gradscope.torch import _sb3_structure as structure_lib

__all__ = ["GradscopeCallback"]

DEFAULT_EVERY = 10
# On the wrapper a callback puts in `algorithm.train`: the callback's own end.
_MARK = "__gradscope_finish__"
_SERIALS = itertools.count()
# Algorithm -> the `_finish` of the callback recording it: a learn() that
# raised outside train() never reached `_on_training_end`; the next one ends it.
_RECORDING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class GradscopeCallback(BaseCallback):
    """Records a Stable-Baselines3 run: which scopes each of its losses updates.

    Example:

        model = DQN("MlpPolicy", "CartPole-v1")
        model.learn(50_000, callback=GradscopeCallback("logs/dqn"))
        # then: tb-gradscope doctor logs

    Scopes are the algorithm's own attribute names: DQN `q_net`,
    `q_net_target`; SAC `actor`, `critic`, `critic_target`, `ent_coef` (its
    `log_ent_coef`); TD3 `actor`, `actor_target`, `critic`, `critic_target`;
    PPO and A2C `policy` (`policy/mlp_extractor/policy_net`, `policy/action_net`,
    `policy/value_net`, ...). Each `X_target` is paired with `X` at the
    algorithm's own rate (SAC and TD3: Polyak, tau 0.005; DQN: a hard copy every
    target_update_interval env steps, declared in gradient steps).

    One recorder step is one gradient step: DQN and PPO one backward; SAC its
    ent_coef_loss, critic_loss and actor_loss; TD3 critic_loss and, every
    policy_delay steps, actor_loss. The recorder is built when the first
    `train()` call begins, and each `train()` call is watched; nothing outside
    it (the rollouts) is. `algorithm.train` is wrapped from a rollout's end
    to the start of that call only, so `model.save()` in a rollout saves a
    plain algorithm.

    Args:
      logdir: the run directory (as for `Recorder`).
      every_n_steps: record gradient steps s with s % every_n_steps == 0.
        Default 10; TD3 11 when its policy_delay is 2, so recorded steps meet
        the delayed actor updates (they meet them when the two are coprime).
      rules: rules as for `Recorder` ("never(critic_loss, actor/*)").
      on_violation: "log", "warn" or "raise", as for `Recorder`.
      losses: renames of SB3's loss names ({"loss": "td"}).
      conflict: record the gradient cosine between losses on shared scopes.
      scopes: a `ScopeSpec` over the scope names.
      verbose: SB3's callback verbosity.
    """

    def __init__(
        self,
        logdir: str | os.PathLike,
        every_n_steps: int | None = None,
        rules: Any = (),
        on_violation: str | None = None,
        losses: Mapping[str, str] | None = None,
        conflict: bool = True,
        scopes: ScopeSpec | None = None,
        verbose: int = 0,
    ):
        super().__init__(verbose)
        if every_n_steps is not None and (
            isinstance(every_n_steps, bool)
            or not isinstance(every_n_steps, int)
            or every_n_steps < 1
        ):
            raise ValueError(f"every_n_steps must be an int >= 1 or None, got {every_n_steps!r}")
        self.logdir = os.fspath(logdir)
        self.every_n_steps = every_n_steps
        self._options = {
            "rules": rules,
            "on_violation": on_violation,
            "conflict": conflict,
            "scopes": scopes,
        }
        if losses:
            self._options["losses"] = dict(losses)
        self.structure: structure_lib.Structure | None = None
        self.recorder: Recorder | None = None
        self._original_train: Callable[..., Any] | None = None
        self._started = False
        self._done = False
        self._serial = next(_SERIALS)

    # ----- SB3's hooks ------------------------------------------------------

    def _on_training_start(self) -> None:
        if self._started:
            self._step_aside(
                f"GradscopeCallback('{self.logdir}') already recorded a learn() call; "
                "pass a new GradscopeCallback (with its own logdir) to each learn() call"
            )
            return
        self._started = True
        self.structure = structure_lib.discover(self.model)
        every = self.every_n_steps or _default_every(self.structure.actor_every)
        if not structure_lib.steps_meeting(every, self.structure.actor_every):
            warn_once(
                ("sb3_every", self._serial),
                f"tb_gradscope: every_n_steps={every} and {type(self.model).__name__}'s "
                f"policy_delay={self.structure.actor_every} share a factor: recorded steps "
                "may never hold an actor update, so actor_loss's gradients go unrecorded; "
                "pass an every_n_steps coprime with policy_delay",
            )
        self.every_n_steps = every
        earlier = _RECORDING.get(self.model)
        if earlier is not None:
            earlier()  # a callback whose learn() raised: its recording ends here
        _RECORDING[self.model] = self._finish

    def _on_rollout_end(self) -> None:
        if not self._done:
            self._wrap_train()  # train() comes next, if learning has started

    def _on_rollout_start(self) -> None:
        self._unwrap_train()

    def _on_step(self) -> bool:
        return True

    def _on_training_end(self) -> None:
        self._finish()

    # ----- the watched train() ---------------------------------------------

    def _wrap_train(self) -> None:
        """Puts a wrapper of `algorithm.train` on the instance until that call
        returns: the wrapper is never there while a rollout runs (where
        `model.save()` would try to pickle it, as a CheckpointCallback does)."""
        model = self.model
        if self._original_train is not None:
            return
        original = model.train

        @functools.wraps(original)
        def train(*args: Any, **kwargs: Any) -> Any:
            self._unwrap_train()
            return self._watched(original, *args, **kwargs)

        setattr(train, _MARK, self._finish)
        self._original_train = original
        model.train = train

    def _unwrap_train(self) -> None:
        """Puts `algorithm.train` back (the class's, or whatever was there)."""
        original, self._original_train = self._original_train, None
        model = getattr(self, "model", None)
        if original is None or model is None:
            return
        if getattr(model.__dict__.get("train"), _MARK, None) == self._finish:
            if getattr(original, "__self__", None) is model and _is_class_method(model, original):
                del model.train
            else:
                model.train = original

    def _watched(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        rec = None if self._done else self._recorder()
        if rec is None or rec.disabled:
            return original(*args, **kwargs)
        watching = self._safely(rec.watch)
        try:
            return original(*args, **kwargs)
        except BaseException:
            if watching:
                self._safely(rec.unwatch)
                watching = False
            self._finish()  # what was recorded stays readable; the error goes on
            raise
        finally:
            if watching:
                self._safely(rec.unwatch)

    def _recorder(self) -> Recorder | None:
        """The recorder, built at the first `train()` call (so its step-0
        analysis watches that call's forward passes, not a rollout's)."""
        if self.recorder is None and self.structure is not None:
            s = self.structure
            try:
                self.recorder = Recorder(
                    self.logdir,
                    every_n_steps=self.every_n_steps,
                    models=s.models,
                    optimizers=s.optimizers,
                    pairs=s.pairs,
                    **self._options,
                )
            except BaseException:  # a bad argument (a rule naming no scope): as Recorder() raises
                self._finish()
                raise
        return self.recorder

    def _finish(self) -> None:
        """Closes the recorder and puts `algorithm.train` back."""
        if self._done:
            return
        self._done = True
        self._unwrap_train()
        model = getattr(self, "model", None)
        if model is not None and _RECORDING.get(model) == self._finish:
            del _RECORDING[model]
        if self.recorder is not None:
            self.recorder.close()

    def _safely(self, action: Callable[[], Any]) -> bool:
        try:
            action()
            return True
        except Exception as e:  # noqa: BLE001 - the recorder must never kill the loop
            self._step_aside(f"{type(e).__name__}: {e}")
            return False

    def _step_aside(self, why: str) -> None:
        warn_once(
            ("sb3_callback_failed", self._serial),
            f"tb_gradscope: GradscopeCallback('{self.logdir}') stopped recording ({why}); "
            "training continues unaffected",
        )
        self._finish()


def _default_every(actor_every: int) -> int:
    """DEFAULT_EVERY, or the next step count coprime with the actor's delay."""
    return next(
        n for n in itertools.count(DEFAULT_EVERY) if structure_lib.steps_meeting(n, actor_every)
    )


def _is_class_method(model: Any, bound: Any) -> bool:
    return getattr(type(model), "train", None) is getattr(bound, "__func__", None)
