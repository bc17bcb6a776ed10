"""The plugin reads what the real recorder writes: a DQN-style step (TD target
through tf.stop_gradient on a target network) recorded by
`tb_gradscope.record.Recorder`, served through both data providers."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from tensorboard import context as tb_context
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import format as fmt
from tb_gradscope.plugin.plugin import GradscopePlugin
from tests.support import providers

pytestmark = pytest.mark.slow

STEPS, EVERY = 10, 2
RECORDED = list(range(0, STEPS, EVERY))


@pytest.fixture(scope="module")
def recorded_logdir(tmp_path_factory) -> str:
    import keras
    import tensorflow as tf

    from tb_gradscope.record import Recorder

    root = tmp_path_factory.mktemp("plugin_recorder")

    def net(name):
        model = keras.Sequential(
            [keras.layers.Dense(8, activation="relu", name="l1"), keras.layers.Dense(2, name="l2")],
            name=name,
        )
        model.build((None, 4))
        return model

    online, target = net("online"), net("target")
    rec = Recorder(
        logdir=str(root / "dqn"), every_n_steps=EVERY, models={"online": online, "target": target}
    )
    optimizer = keras.optimizers.SGD(0.1)
    x = tf.constant(np.random.RandomState(0).randn(16, 4), tf.float32)
    variables = online.trainable_variables + target.trainable_variables

    @tf.function
    def train_step():
        with rec.tape() as tape:
            q = online(x)
            td = tf.reduce_mean((q - (1.0 + 0.9 * tf.stop_gradient(target(x)))) ** 2)
            aux = tf.reduce_mean(q**2)
        rec.apply(optimizer, rec.gradients(tape, {"td": td, "aux": aux}, variables))

    for _ in range(STEPS):
        train_step()
    rec.close()
    return str(root)


@pytest.fixture(scope="module", params=["python", "rust"])
def client(request, recorded_logdir):
    def make(data_provider):
        plugin = GradscopePlugin(
            base_plugin.TBContext(data_provider=data_provider, sampling_hints={})
        )
        return werkzeug_test.Client(application.TensorBoardWSGI([plugin]))

    if request.param == "python":
        yield make(providers.python_provider(recorded_logdir, {fmt.PLUGIN_NAME: 1000}))
        return
    with providers.rust_provider(recorded_logdir, {fmt.PLUGIN_NAME: 1000}) as rust:
        deadline = time.monotonic() + 60
        ctx = tb_context.RequestContext()
        while time.monotonic() < deadline:
            listing = rust.list_tensors(ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME).get(
                "dqn", {}
            )
            blobs = rust.list_blob_sequences(
                ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME
            ).get("dqn", {})
            if listing and blobs and max(t.max_step for t in listing.values()) == RECORDED[-1]:
                break
            time.sleep(0.2)
        yield make(rust)


def get(client, route: str, **params):
    response = client.get("/data/plugin/gradscope/" + route, query_string=params)
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data(as_text=True))


def test_recorded_steps_losses_and_scopes(client):
    run = get(client, "run", run="dqn")
    assert run["steps"] == RECORDED
    assert sorted(loss["name"] for loss in run["losses"]) == ["aux", "td"]
    names = [s["name"] for s in run["scopes"]]
    assert {"online", "online/l1", "online/l2", "target", "target/l1", "target/l2"} <= set(names)
    assert run["has_flowgraph"] is True and run["warnings"] == []


def test_stop_gradient_blocks_target_net_in_recorded_logs(client):
    matrix = get(client, "matrix", run="dqn")
    assert matrix["step"] == RECORDED[-1]
    for scope in ("target/l1", "target/l2"):
        assert matrix["cells"]["td"][scope]["state"] == "blocked"
        assert matrix["cells"]["aux"][scope]["state"] == "independent"
        assert matrix["updates"][scope]["update_norm"] == 0.0
    for scope in ("online/l1", "online/l2"):
        cell = matrix["cells"]["td"][scope]
        assert cell["state"] == "updates" and cell["l2"] > 0
        assert matrix["updates"][scope]["update_norm"] > 0


def test_flowgraph_names_the_blocking_op(client):
    graph = get(client, "flowgraph", run="dqn")["flowgraph"]
    edges = [e for e in graph["blocked_edges"] if e["loss"] == "td"]
    assert edges and all(e["op_type"] == "StopGradient" for e in edges)
    assert any(e["producer_scope"].startswith("target") for e in edges)
