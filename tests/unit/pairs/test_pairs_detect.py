"""Pairs: declared by prefixes, models or an EMA, and detected by structure."""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

from tb_gradscope.pairs import detect_pairs, pair_ema, pair_models, pair_prefixes
from tb_gradscope.scopes import segment_role as role


def _tf1_net(scope: str, hidden: int = 5) -> list[tf.Variable]:
    """Variables named like TF1 `variable_scope`s: `<scope>/l1/w:0`."""
    with tf.name_scope(scope):
        return [
            tf.Variable(tf.random.normal([4, hidden]), name="l1/w"),
            tf.Variable(tf.zeros([hidden]), name="l1/b"),
            tf.Variable(tf.random.normal([hidden, 2]), name="l2/w"),
        ]


def _keras(name: str, batchnorm: bool = False) -> keras.Model:
    layers = [keras.Input((4,)), keras.layers.Dense(5)]
    if batchnorm:
        layers.append(keras.layers.BatchNormalization())
    return keras.Sequential(layers + [keras.layers.Dense(2)], name=name)


def test_dqn_eval_net_and_target_net_are_detected():
    variables = _tf1_net("eval_net") + _tf1_net("target_net")
    (pair,) = detect_pairs(variables)
    assert pair.name == "target_net<-eval_net"
    assert pair.target_names == ("target_net/l1/w", "target_net/l1/b", "target_net/l2/w")
    assert pair.online_names == ("eval_net/l1/w", "eval_net/l1/b", "eval_net/l2/w")
    assert [v.name for v in pair.target] == [f"target_net/{n}:0" for n in ("l1/w", "l1/b", "l2/w")]


def test_nested_actor_critic_pairs_are_detected_under_their_parent():
    variables = []
    for agent in ("Actor", "Critic"):
        variables += _tf1_net(f"{agent}/eval_net") + _tf1_net(f"{agent}/target_net")
    pairs = detect_pairs(variables)
    assert sorted(p.name for p in pairs) == [
        "Actor/target_net<-Actor/eval_net",
        "Critic/target_net<-Critic/eval_net",
    ]
    critic = next(p for p in pairs if p.name.startswith("Critic"))
    assert critic.target_root == "Critic/target_net" and critic.online_root == "Critic/eval_net"


def test_seed03_tare_follows_beh():
    variables = _tf1_net("beh") + _tf1_net("tare")
    (pair,) = detect_pairs(variables)
    assert (pair.target_root, pair.online_root) == ("tare", "beh")


def test_different_structure_is_not_a_pair():
    variables = _tf1_net("eval_net", hidden=5) + _tf1_net("target_net", hidden=6)
    assert detect_pairs(variables) == []


def test_role_words_are_stripped_to_compare_siblings():
    assert role("target_q_net") == ("target", "q_net")
    assert role("q_net") == ("", "q_net")
    assert role("eval_net") == ("online", "net")
    assert role("Critic") == ("", "critic")


def test_keras_models_pair_by_order_with_batchnorm_state_flagged():
    online, target = _keras("online", batchnorm=True), _keras("target", batchnorm=True)
    (pair,) = detect_pairs(models=[target, online])
    assert pair.name == "target<-online"
    # Keras numbers layers globally, so names differ and order decides.
    assert pair.target_names[0] != pair.online_names[0].replace("online", "target")
    assert [n.rsplit("/", 1)[-1] for n in pair.state_names] == ["moving_mean", "moving_variance"]
    assert sum(pair.state) == 2
    for t, o in zip(pair.target, pair.online):
        assert tuple(t.shape) == tuple(o.shape)


def test_optimizer_slots_are_never_paired():
    online, target = _keras("online"), _keras("target")
    optimizer = keras.optimizers.Adam()
    optimizer.build(online.trainable_weights + target.trainable_weights)
    everything = online.weights + target.weights + list(optimizer.variables)
    (pair,) = detect_pairs(everything, models=[online, target], optimizers=[optimizer])
    slot_keys = {id(v) for v in optimizer.variables}
    assert not slot_keys & {id(v) for v in pair.target + pair.online}
    assert len(pair.target) == len(online.weights)
    # Also without being told which optimizer: the names give slots away.
    (again,) = detect_pairs(everything, models=[online, target])
    assert again.target_names == pair.target_names


def test_ema_shadows_pair_with_their_sources():
    online = _keras("online")
    ema = tf.train.ExponentialMovingAverage(decay=0.99)
    ema.apply([v.value for v in online.trainable_weights])
    shadows = [ema.average(v.value) for v in online.trainable_weights]
    (pair,) = detect_pairs(online.weights + shadows, models=[online])
    assert pair.name == "ema<-online"
    assert pair.target_names == tuple(f"ema/{n}" for n in pair.online_names)
    assert [t.name for t in pair.target] == [s.name for s in shadows]


def test_pair_ema_declares_tau_from_the_decay():
    online = _keras("online")
    ema = tf.train.ExponentialMovingAverage(decay=0.95)
    ema.apply([v.value for v in online.trainable_weights])
    pair = pair_ema(ema, online.trainable_weights)
    assert pair.tau == pytest.approx(0.05)
    assert pair.declared() == {"target": "ema", "online": "online", "tau": pytest.approx(0.05)}


def test_pair_ema_before_apply_says_to_apply_first():
    online = _keras("online")
    with pytest.raises(ValueError, match=r"call ema.apply"):
        pair_ema(tf.train.ExponentialMovingAverage(0.9), online.trainable_weights)


def test_pair_prefixes_matches_by_relative_name_and_declares():
    variables = _tf1_net("target_net") + _tf1_net("eval_net")  # order differs from names
    pair = pair_prefixes(variables, tau=0.01, every=None)
    assert pair.declared() == {"target": "target_net", "online": "eval_net", "tau": 0.01}
    for t, o in zip(pair.target_names, pair.online_names):
        assert t.split("/", 1)[1] == o.split("/", 1)[1]


def test_pair_prefixes_names_the_missing_scope():
    with pytest.raises(ValueError, match=r"no variable under scope 'tgt'.*eval_net"):
        pair_prefixes(_tf1_net("eval_net"), target="tgt")


def test_pair_models_with_different_architectures_names_both_counts():
    small = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)], name="target")
    with pytest.raises(ValueError, match=r"'target' has 2 weights but online model 'online' has 4"):
        pair_models(small, _keras("online"))


def test_pair_shapes_must_match_by_order():
    a = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)], name="target"
    )
    with pytest.raises(ValueError, match=r"target 'target/dense_\d+/kernel' \(4, 3\) meets online"):
        pair_models(a, _keras("online"))


def test_declared_tau_outside_unit_interval_is_refused():
    with pytest.raises(ValueError, match=r"tau must be a number in \(0, 1\]"):
        pair_models(_keras("target"), _keras("online"), tau=1.5)


def test_tf1_slot_variables_on_both_sides_are_left_out():
    variables = _tf1_net("eval_net") + _tf1_net("target_net")
    slots = []
    for scope in ("eval_net", "target_net"):  # as if Adam also trained the target
        with tf.name_scope(scope):
            slots += [tf.Variable(tf.zeros([4, 5]), name=f"l1/w/{s}") for s in ("Adam", "Adam_1")]
    (pair,) = detect_pairs(variables + slots)
    assert len(pair.target) == 3
    assert not any("Adam" in n for n in pair.target_names + pair.online_names)


@pytest.mark.parametrize(
    "old, online", [("oldpi", "pi"), ("old_policy", "policy"), ("pi_old", "pi")]
)
def test_a_ppo_old_policy_snapshot_is_detected(old, online):
    """PPO keeps a `trainable=False` copy of its policy (`oldpi`), assigned from the
    online one before each update: a pair, target `oldpi`, online `pi`."""
    variables = _tf1_net(online) + _tf1_net(old) + _tf1_net("critic")
    (pair,) = detect_pairs(variables)
    assert pair.name == f"{old}<-{online}"
    assert pair.target_names == tuple(f"{old}/{n}" for n in ("l1/w", "l1/b", "l2/w"))


def test_a_name_merely_ending_in_old_is_no_snapshot():
    assert detect_pairs(_tf1_net("threshold") + _tf1_net("thresh")) == []
