"""Keras 3 steps: what the optimizer applies, frozen layers, EMA shadows."""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.analysis import analyze_graph
from tb_gradscope.scopes import leaf_scope


@pytest.fixture(scope="module")
def frozen_and_ema():
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(8, name="body")(inputs)
    outputs = keras.layers.Dense(1, name="head")(hidden)
    model = keras.Model(inputs, outputs, name="net")
    model.get_layer("body").trainable = False
    opt = keras.optimizers.Adam(0.01)
    opt.build(model.trainable_variables)
    ema = tf.train.ExponentialMovingAverage(decay=0.9)
    weights = [v.value for v in model.trainable_variables]

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.square(model(x) - y))
        grads = tape.gradient(loss, model.trainable_variables)
        opt.apply_gradients(zip(grads, model.trainable_variables))
        ema.apply(weights)
        return {"mse": loss}

    cf = step.get_concrete_function(tf.TensorSpec([None, 4]), tf.TensorSpec([None, 1]))
    shadows = [ema.average(w) for w in weights]
    scopes = [(v, "net/" + leaf_scope(v.path)) for v in model.variables]
    scopes += [(s, "shadow/" + leaf_scope(s.name)) for s in shadows]
    return analyze_graph(cf.graph, {"mse": cf.structured_outputs["mse"]}, scopes)


def test_frozen_layer_is_gradient_reachable_but_ignored(frozen_and_ema):
    cells = frozen_and_ema.cells["mse"]
    assert cells["net/head"] == "updates"
    assert cells["net/body"] == "ignored"


def test_ema_shadow_writes_are_not_optimizer_updates(frozen_and_ema):
    applied = frozen_and_ema.applied
    assert applied == ["net", "net/head"]
    shadow_cells = {
        s: st for s, st in frozen_and_ema.cells["mse"].items() if s.startswith("shadow")
    }
    assert shadow_cells and set(shadow_cells.values()) == {"independent"}


def test_keras_functional_step_without_optimizer_reports_unknown_applied():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="d")], name="m")
    x = tf.constant(np.ones((2, 3), "float32"))
    cf = tf.function(lambda x: {"l": tf.reduce_sum(model(x))}).get_concrete_function(x)
    fg = analyze_graph(
        cf.graph,
        {"l": cf.structured_outputs["l"]},
        [(v, leaf_scope(v.path)) for v in model.variables],
    )
    assert fg.applied is None
    assert fg.cells["l"] and set(fg.cells["l"].values()) == {"updates"}


def test_mirrored_variables_are_matched_through_their_replicas():
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        w = tf.Variable(tf.ones([3, 1]), name="net/kernel")
        t = tf.Variable(tf.ones([3, 1]), name="tgt/kernel")

    @tf.function
    def step(x):
        per_replica = strategy.run(
            lambda x: tf.reduce_mean(x @ w + tf.stop_gradient(x @ t)), args=(x,)
        )
        return {"l": strategy.reduce("MEAN", per_replica, axis=None)}

    cf = step.get_concrete_function(tf.TensorSpec([2, 3]))
    fg = analyze_graph(cf.graph, {"l": cf.structured_outputs["l"]}, [(w, "net"), (t, "tgt")])
    assert fg.cells["l"] == {"net": "updates", "tgt": "blocked"}
    assert fg.warnings == []
