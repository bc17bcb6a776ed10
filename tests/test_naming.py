"""Variables -> scope names: Keras 3 paths under a model root, tf.Module and TF1 names."""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope import naming
from tb_gradscope.record import Recorder, build_variable_layout, full_name
from tb_gradscope.scopes import ScopeSpec
from tests.record_fixtures import batch, only, read_records, two_head_model, two_losses


def _functional(name):
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, name=f"{name}_d1")(inputs)
    return keras.Model(inputs, keras.layers.Dense(2, name=f"{name}_d2")(hidden), name=name)


def test_functional_model_gets_its_root_from_the_mapping_key():
    model = _functional("m1")
    assert [v.path for v in model.weights][0] == "m1_d1/kernel"  # Keras 3: no model prefix
    named = naming.model_variables("target", model)
    assert [n for _, n in named] == [
        "target/m1_d1/kernel",
        "target/m1_d1/bias",
        "target/m1_d2/kernel",
        "target/m1_d2/bias",
    ]
    assert naming.model_roots([model])[0][0] == "m1"


def test_sequential_model_name_is_not_doubled_and_can_be_renamed():
    model = keras.Sequential([keras.layers.Dense(2, name="d")], name="seq")
    model.build((None, 3))
    assert [n for _, n in naming.model_variables("seq", model)] == ["seq/d/kernel", "seq/d/bias"]
    assert [n for _, n in naming.model_variables("online", model)] == ["online/d/kernel", "online/d/bias"]


def test_tf_module_names_and_non_float_variables():
    class Net(tf.Module):
        def __init__(self):
            super().__init__(name="net")
            with self.name_scope:
                self.w = tf.Variable(tf.ones([2, 2]), name="w")
                self.count = tf.Variable(0, name="count")

    net = Net()
    assert full_name(net.w) == "net/w"
    assert [n for _, n in naming.model_variables("agent", net)] == ["agent/w"]


def test_tf1_variable_scope_names():
    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.variable_scope("Agent"):
            with tf.compat.v1.variable_scope("layer2_1"):
                w = tf.compat.v1.get_variable("w21", [3, 1])
    assert w.name == "Agent/layer2_1/w21:0" and full_name(w) == "Agent/layer2_1/w21"
    layout = build_variable_layout([(w, full_name(w))])
    assert layout.layout.scopes == ("Agent", "Agent/layer2_1")


def test_optimizer_slots_are_never_scopes():
    model = _functional("m2")
    model.compile(optimizer=keras.optimizers.Adam(), loss="mse")
    model.optimizer.build(model.trainable_variables)
    assert model.optimizer.variables
    names = [n for _, n in naming.model_variables("m2", model)]
    assert len(names) == 4 and not any("adam" in n or "momentum" in n for n in names)


def test_keras_variable_and_its_tf_variable_share_a_key():
    model = _functional("m3")
    v = model.weights[0]
    assert naming.variable_key(v) == naming.variable_key(v.value)


def test_a_shared_layer_is_named_by_the_first_model():
    shared = keras.layers.Dense(2, name="shared")
    a = keras.Sequential([shared], name="a")
    b = keras.Sequential([shared], name="b")
    a.build((None, 3))
    b.build((None, 3))
    named = [nv for root, m in naming.model_roots({"a": a, "b": b}) for nv in naming.model_variables(root, m)]
    layout = build_variable_layout(named)
    assert layout.layout.variable_names == ("a/shared/kernel", "a/shared/bias")


@pytest.mark.parametrize(
    "spec, scopes",
    [
        (ScopeSpec(exclude=("online/head_b",)), ("online", "online/head_a", "online/trunk")),
        (ScopeSpec(include=("online/trunk",)), ("online", "online/trunk")),
        (ScopeSpec(max_depth=1), ("online",)),
        (
            ScopeSpec(mapping=lambda n: "heads" if "head" in n else "body"),
            ("body", "heads"),
        ),
    ],
)
def test_scope_spec_shapes_the_recorded_rows(tmp_path, spec, scopes):
    model = two_head_model(seed=4)
    rec = Recorder(logdir=str(tmp_path), every_n_steps=1, models={"online": model}, scopes=spec)
    with rec.tape() as tape:
        losses = two_losses(model, *batch(0))
    rec.gradients(tape, losses, model.trainable_variables)
    rec.close()
    table = only(read_records(str(tmp_path)))[(fmt.Kind.GRAD_STATS, "a")][0]
    assert table.info.scopes == scopes
    assert rec.layout.layout.scopes == scopes


def test_bad_model_roots_name_the_fix():
    with pytest.raises(ValueError, match=r"model root scope '/x' is not a usable scope name"):
        naming.model_roots({"/x": _functional("m4")})
