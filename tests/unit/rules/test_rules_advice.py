"""A violation's advice names the fix for the cause it found: the optimizer's
variables when the path is needed by another loss, tf.stop_gradient otherwise."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope import Recorder
from tb_gradscope.rules.check import CAUSE_MISSING_CUT, CAUSE_OPTIMIZER_SCOPE


def _mlp(name: str, inputs: int, outputs: int = 1) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(4, activation="tanh", name="l1"),
            keras.layers.Dense(outputs, name="l2"),
        ],
        name=name,
    )


def _violations(tmp_path, critic_vars_include_actor: bool, cut_target: bool):
    keras.utils.set_random_seed(3)
    actor, critic = _mlp("actor", 3), _mlp("critic", 4)
    critic_opt, actor_opt = keras.optimizers.SGD(0.01), keras.optimizers.SGD(0.01)
    rec = Recorder(
        str(tmp_path),
        every_n_steps=1,
        models={"actor": actor, "critic": critic},
        rules=["never(td, actor/*)"],
    )

    @tf.function
    def step(s, r):
        with rec.training_step():
            with rec.tape() as tape:
                q = critic(tf.concat([s, actor(s)], 1))[:, 0]
                target = r + 0.9 * q
                target = tf.stop_gradient(target) if cut_target else target
                losses = {"td": tf.reduce_mean((target - q) ** 2 + (r - q) ** 2)}
            variables = critic.trainable_variables + (
                actor.trainable_variables if critic_vars_include_actor else []
            )
            rec.apply(critic_opt, rec.gradients(tape, losses, variables))
            with rec.tape() as tape:
                losses = {"actor": -tf.reduce_mean(critic(tf.concat([s, actor(s)], 1)))}
            rec.apply(actor_opt, rec.gradients(tape, losses, actor.trainable_variables))

    rng = np.random.default_rng(0)
    for _ in range(2):
        step(rng.normal(size=(8, 3)).astype("float32"), rng.normal(size=8).astype("float32"))
    rec.close()
    return rec.violations


def test_critic_optimizer_writing_the_actor_is_told_to_fix_its_var_list(tmp_path):
    violations = _violations(tmp_path, critic_vars_include_actor=True, cut_target=True)
    assert violations, "the leak must be flagged"
    for event in violations:
        assert event.evidence["cause"] == CAUSE_OPTIMIZER_SCOPE, event.message
        assert (
            "var_list" in event.message
            and "stop_gradient" not in event.message.split("(a tf.stop_gradient")[0]
        )
        assert event.evidence["needed_by"] == ["actor"]


def test_correct_var_lists_break_no_rule(tmp_path):
    assert _violations(tmp_path, critic_vars_include_actor=False, cut_target=True) == []


def test_target_without_stop_gradient_is_told_to_cut_the_path(tmp_path):
    keras.utils.set_random_seed(4)
    online, target = _mlp("online", 3, 2), _mlp("target", 3, 2)
    opt = keras.optimizers.SGD(0.01)
    rec = Recorder(
        str(tmp_path),
        every_n_steps=1,
        models={"online": online, "target": target},
        rules=["never(td, target/*)"],
    )

    @tf.function
    def step(s, r):
        with rec.tape() as tape:
            y = r + 0.9 * tf.reduce_max(target(s), axis=1)  # leak: no tf.stop_gradient
            losses = {"td": tf.reduce_mean((y - online(s)[:, 0]) ** 2)}
        rec.apply(
            opt,
            rec.gradients(tape, losses, online.trainable_variables + target.trainable_variables),
        )

    step(tf.ones((4, 3)), tf.ones(4))
    rec.close()
    assert rec.violations
    for event in rec.violations:
        assert event.evidence["cause"] == CAUSE_MISSING_CUT, event.message
        assert "tf.stop_gradient" in event.message
