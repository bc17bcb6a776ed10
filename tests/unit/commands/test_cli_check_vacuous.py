"""`tb-gradscope check` never passes silently: rules (given or recorded) that no
recorded step could check exit 2, saying so (issue 35, item 8)."""

from __future__ import annotations

from tb_gradscope import format as fmt
from tests.support import rules_fixtures as rf
from tests.unit.commands.test_cli_check import check

SCOPES = ["online", "online/l1"]


def _updates_only(run_dir: str) -> None:
    """What a step whose gradients bypass rec.gradients leaves: ||dtheta|| per
    scope, no gradient table, no FlowGraph."""
    updates = fmt.make_info(fmt.Kind.UPDATE_STATS, "", SCOPES)
    rf.write_records(run_dir, [(updates, step, [[0.1, 3.0]] * 2) for step in (0, 10)])


def test_given_rules_with_no_recorded_step_to_check_them_exit_2(tmp_path):
    _updates_only(str(tmp_path / "run"))
    rules = tmp_path / "rules.toml"
    rules.write_text('rules = ["never(td, target/*)"]\n', encoding="utf-8")
    code, out, err = check(str(tmp_path), "--rules", str(rules))
    assert code == 2, (out, err)
    assert "rules were given but no recorded step could check them" in err


def test_recorded_rules_naming_only_losses_never_recorded_exit_2(tmp_path):
    grads = fmt.make_info(
        fmt.Kind.GRAD_STATS, "unknown", SCOPES, attrs={"rules": ["never(td, target/*)"]}
    )
    rf.write_records(
        str(tmp_path / "run"), [(grads, step, [[2.0, 1.0, 0.5, 0.0, 0.0]] * 2) for step in (0, 10)]
    )
    code, out, err = check(str(tmp_path))
    assert code == 2, (out, err)
    assert "rules were given but no recorded step could check them" in err
    assert "never(td, target/*)" in out  # the line saying what the rule names that no run recorded


def test_a_rule_checked_somewhere_keeps_the_exit_status_of_its_verdict(tmp_path):
    rf.write_records(str(tmp_path / "dqn"), rf.dqn_records(leaky=False))
    _updates_only(str(tmp_path / "bare"))
    rules = tmp_path / "rules.toml"
    rules.write_text('rules = ["never(td, target/*)"]\n', encoding="utf-8")
    code, out, err = check(str(tmp_path), "--rules", str(rules))
    assert code == 0, (out, err)


def test_rules_given_to_a_recorder_whose_step_brings_its_own_gradients_are_in_the_logs(tmp_path):
    """The step takes its gradients from its own tape and hands them to
    rec.apply (issue 57, item 12): no loss is recorded, so nothing can check
    the rules the recorder was given. The logs carry them, and `check` on the
    logs alone says nothing was checked (exit 2) instead of "no rules"."""
    import keras
    import tensorflow as tf

    from tb_gradscope.record import Recorder

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="l1")], name="online")
    rec = Recorder(
        str(tmp_path / "run"),
        every_n_steps=1,
        models={"online": model},
        rules=["never(td, target/*)"],
    )
    opt = keras.optimizers.SGD(0.1)
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(tf.ones((2, 3))) ** 2)
        grads = tape.gradient(loss, model.trainable_variables)
        rec.apply(opt, list(zip(grads, model.trainable_variables)))
    rec.close()
    code, out, err = check(str(tmp_path))
    assert "no rules given and none recorded" not in err
    assert code == 2, (out, err)
    assert "never(td, target/*)" in out
