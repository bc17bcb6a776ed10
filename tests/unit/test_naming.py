"""Variables -> scope names: Keras 3 paths under a model root, tf.Module and TF1 names."""

from __future__ import annotations

import keras
import pytest
import tensorflow as tf

from tb_gradscope import _naming as naming
from tb_gradscope import format as fmt
from tb_gradscope import scopes as scopes_lib
from tb_gradscope._naming import build_variable_layout, full_name
from tb_gradscope.record import Recorder
from tb_gradscope.scopes import ScopeSpec
from tests.support.record_fixtures import batch, only, read_records, two_head_model, two_losses


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
    assert [n for _, n in naming.model_variables("online", model)] == [
        "online/d/kernel",
        "online/d/bias",
    ]


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
    named = [
        nv
        for root, m in naming.model_roots({"a": a, "b": b})
        for nv in naming.model_variables(root, m)
    ]
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


def _wgan_parts():
    z = keras.Input((2,))
    generator = keras.Model(z, keras.layers.Dense(3)(keras.layers.Dense(4)(z)), name="generator")
    x = keras.Input((3,))
    critic = keras.Model(x, keras.layers.Dense(1)(keras.layers.Dense(4)(x)), name="critic")
    return generator, critic


def test_functional_sub_models_of_a_subclassed_model_are_scope_levels():
    class WGAN(keras.Model):
        def __init__(self):
            super().__init__(name="wgan")
            self.generator, self.critic = _wgan_parts()

    wgan = WGAN()
    assert not wgan.weights[0].path.startswith("generator")  # Keras 3 gives them no model prefix
    named = [n for _, n in naming.model_variables("wgan", wgan)]
    assert len(named) == 8
    assert all(n.startswith("wgan/generator/dense") for n in named[:4]), named
    assert all(n.startswith("wgan/critic/dense") for n in named[4:]), named
    assert [v for v, _ in naming.model_variables("wgan", wgan)] == list(
        wgan.weights
    )  # order kept (pairs)


def test_functional_sub_models_of_a_functional_model_are_scope_levels():
    generator, critic = _wgan_parts()
    z = keras.Input((2,))
    combined = keras.Model(z, critic(generator(z)), name="combined")
    leaves = {scopes_lib.leaf_scope(n) for _, n in naming.model_variables("gan", combined)}
    assert {s.rsplit("/", 1)[0] for s in leaves} == {"gan/generator", "gan/critic"}


def test_nested_sequential_names_are_not_doubled():
    inner = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="l1")], name="inner")
    outer = keras.Sequential(
        [keras.Input((3,)), inner, keras.layers.Dense(2, name="out")], name="outer"
    )
    assert [n for _, n in naming.model_variables("outer", outer)] == [
        "outer/inner/l1/kernel",
        "outer/inner/l1/bias",
        "outer/out/kernel",
        "outer/out/bias",
    ]


def test_sub_model_of_a_subclassed_model_built_in_call_is_named_once():
    class Inner(keras.Model):
        def __init__(self):
            super().__init__(name="inner")
            self.d = keras.layers.Dense(2, name="d")

        def call(self, x):
            return self.d(x)

    class Outer(keras.Model):
        def __init__(self):
            super().__init__(name="outer")
            self.inner = Inner()

        def call(self, x):
            return self.inner(x)

    outer = Outer()
    outer(tf.zeros([1, 3]))
    assert [n for _, n in naming.model_variables("outer", outer)] == [
        "outer/inner/d/kernel",
        "outer/inner/d/bias",
    ]


def test_a_sub_model_inside_a_combined_model_too_is_named_where_it_is_shallowest():
    class GAN(keras.Model):
        def __init__(self):
            super().__init__(name="gan")
            self.generator, self.critic = _wgan_parts()
            z = keras.Input((2,))
            self.combined = keras.Model(z, self.critic(self.generator(z)), name="combined")

    leaves = {
        scopes_lib.leaf_scope(n).rsplit("/", 1)[0] for _, n in naming.model_variables("gan", GAN())
    }
    assert leaves == {"gan/generator", "gan/critic"}


class _EmaHolder(keras.Model):
    """An online network and its EMA made by `keras.models.clone_model` (same
    model and layer names), held side by side; `wrap` puts the clone inside a
    functional model of the online network's name."""

    def __init__(self, wrap: bool = False):
        super().__init__(name="byol")
        self.online_network = _functional("encoder")
        clone = keras.models.clone_model(self.online_network)
        if wrap:
            inputs = keras.Input((3,))
            clone = keras.Model(inputs, clone(inputs), name="encoder")
        self.ema_network = clone

    def call(self, x):
        return self.online_network(x) + self.ema_network(x)


@pytest.mark.parametrize("wrap", [False, True], ids=["clone", "wrapped_clone"])
def test_a_clone_with_the_same_names_gets_its_own_root(wrap):
    """Two networks never share scopes: siblings with one model name are named
    by the attributes holding them, and the collision is said once."""
    model = _EmaHolder(wrap)
    model(tf.zeros((2, 3)))
    with pytest.warns(UserWarning, match=r"'encoder'.*online_network.*ema_network"):
        named = naming.model_variables("byol", model)
    names = [n for _, n in named]
    assert len(set(names)) == len(names) == 8, names
    assert all(n.startswith("byol/online_network/encoder_d") for n in names[:4]), names
    assert all(n.startswith("byol/ema_network/") for n in names[4:]), names
    layout = build_variable_layout(named)
    online = layout.layout.members[layout.layout.index("byol/online_network")]
    assert len(online) == 4  # the EMA's variables are not rolled up under the online network


def test_models_listed_under_one_name_are_refused():
    online = _functional("encoder")
    with pytest.raises(ValueError, match="'encoder'.*models=\\{"):
        naming.model_roots([online, keras.models.clone_model(online)])
