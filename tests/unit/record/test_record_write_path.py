"""How many modules a record crosses from the public call to the write.

Issue 34 asks that a record cross at most four modules from `rec.apply` (or
`record_drift`, a Keras batch's end, a TF1 `sess.run`) to the event file. These
tests watch real recorders: every call of the function that writes a record
(`tf.summary.write` for TF2 and Keras, `RecordWriter._write` for TF1) notes the
tb_gradscope modules on the Python stack, from the public entry down to it. For
`rec.function` the write runs on the host, from the tables the traced variant
returned, so that chain is the host's; an eager step writes where it computes
(recorder -> recording -> state or drift_monitor -> writing). Under a
tf.distribute strategy a record also passes `_distribute`'s merge_call, which
this single-device test does not see.
"""

from __future__ import annotations

import traceback

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope.core import writer as host_writer
from tb_gradscope.format.metadata import Kind
from tb_gradscope.integrations.keras import GradscopeCallback
from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.pairs import pair_models
from tb_gradscope.record import Recorder

MAX_MODULES = 4
TAGS = ("gradscope/grad_stats/td", "gradscope/update_stats", "gradscope/drift/target<-online")


def _chain() -> tuple[str, ...]:
    """The tb_gradscope modules on the stack, outermost first, repeats folded."""
    modules: list[str] = []
    for frame in traceback.extract_stack()[:-2]:
        if "/tb_gradscope/" in frame.filename:
            module = frame.filename.split("/tb_gradscope/")[1]
            if not modules or modules[-1] != module:
                modules.append(module)
    return tuple(modules)


def _net(name: str) -> keras.Model:
    return keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(8, name="l1"), keras.layers.Dense(2, name="l2")],
        name=name,
    )


@pytest.fixture(scope="module")
def chains(tmp_path_factory) -> dict[tuple[str, str], set[tuple[str, ...]]]:
    """{(path, tag): the chains seen} for an eager loop and its `rec.function`."""
    seen: dict[tuple[str, str], set[tuple[str, ...]]] = {}
    real = tf.summary.write
    path = ""

    def watched(tag, *args, **kwargs):
        seen.setdefault((path, tag), set()).add(_chain())
        return real(tag, *args, **kwargs)

    keras.utils.set_random_seed(0)
    online, target = _net("online"), _net("target")
    target.set_weights(online.get_weights())
    optimizer = keras.optimizers.Adam(1e-3)
    x = tf.constant(np.ones((4, 4), "float32"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tf.summary, "write", watched)
        for path in ("eager", "rec.function"):
            rec = Recorder(
                logdir=str(tmp_path_factory.mktemp(path)),
                every_n_steps=2,
                models={"online": online, "target": target},
                pairs=[pair_models(target, online)],
            )

            def step(rec=rec):
                with rec.tape() as tape:
                    loss = tf.reduce_mean(tf.square(online(x) - tf.stop_gradient(target(x))))
                rec.apply(optimizer, rec.gradients(tape, {"td": loss}, online.trainable_variables))
                rec.record_drift()

            run = rec.function(step) if path == "rec.function" else step
            for _ in range(4):
                run()
            rec.close()
    return seen


@pytest.mark.parametrize("path", ["rec.function", "eager"])
@pytest.mark.parametrize("tag", TAGS)
def test_a_record_crosses_at_most_four_modules(chains, path, tag):
    assert (path, tag) in chains, sorted(chains)
    for chain in chains[(path, tag)]:
        assert chain[-1] == "record/_writing.py", chain
        assert len(set(chain)) <= MAX_MODULES, " -> ".join(chain)


def test_a_keras_record_crosses_at_most_four_modules(tmp_path):
    seen: set[tuple[str, tuple[str, ...]]] = set()
    real = tf.summary.write

    def watched(tag, *args, **kwargs):
        seen.add((tag, _chain()))
        return real(tag, *args, **kwargs)

    keras.utils.set_random_seed(0)
    model = _net("agent")
    model.compile("adam", "mse")
    x, y = np.ones((32, 4), "float32"), np.ones((32, 2), "float32")
    callback = GradscopeCallback(str(tmp_path), every_n_batches=2, rules=["never(mse, agent/l1)"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tf.summary, "write", watched)
        model.fit(x, y, batch_size=8, verbose=0, callbacks=[callback])
    tags = {tag for tag, _ in seen}
    # Keras names a compiled loss after its function; the rule is broken on purpose,
    # so its violation (an EVENTS record) is written too.
    assert {
        "gradscope/grad_stats/mse",
        "gradscope/update_stats",
        "gradscope/flowgraph",
        "gradscope/events",
    } <= tags, sorted(tags)
    for _, chain in seen:
        assert chain[0].startswith("integrations/keras/"), chain
        assert chain[-1] == "record/_writing.py", chain
        assert len(set(chain)) <= MAX_MODULES, " -> ".join(chain)


def test_a_tf1_record_crosses_at_most_four_modules(tmp_path):
    seen: set[tuple[Kind, tuple[str, ...]]] = set()
    real = host_writer.RecordWriter._write

    def watched(self, info, *args, **kwargs):
        seen.add((info.kind, _chain()))
        return real(self, info, *args, **kwargs)

    v1 = tf.compat.v1
    with tf.Graph().as_default():
        x = v1.placeholder(tf.float32, [None, 4], "x")
        with v1.variable_scope("online"):
            y = tf.matmul(x, v1.get_variable("w", [4, 1]))
        with v1.variable_scope("target"):
            t = tf.matmul(x, v1.get_variable("w", [4, 1]))
        loss = tf.reduce_mean(tf.square(y - tf.stop_gradient(t)))
        train = v1.train.AdamOptimizer(1e-2).minimize(loss)
        rec = GraphRecorder(
            str(tmp_path), losses={"td": loss}, train_ops={"td": train}, every_n_steps=2
        )
        with pytest.MonkeyPatch.context() as patch, v1.Session() as sess:
            patch.setattr(host_writer.RecordWriter, "_write", watched)
            sess = rec.wrap(sess)
            sess.run(v1.global_variables_initializer())
            for _ in range(4):
                sess.run(train, {x: np.ones((2, 4))})
    assert {Kind.GRAD_STATS, Kind.UPDATE_STATS, Kind.FLOWGRAPH} <= {kind for kind, _ in seen}
    for _, chain in seen:
        assert chain[0].startswith("integrations/tf1/"), chain
        assert chain[-1] == "core/writer.py", chain  # the writer every host-side recorder shares
        assert len(set(chain)) <= MAX_MODULES, " -> ".join(chain)


def test_the_watch_sees_the_whole_eager_chain(chains):
    """The watch is not blind: the eager chain starts at the public entry."""
    (chain,) = chains[("eager", "gradscope/grad_stats/td")]
    assert chain[0] == "record/_recorder.py" and chain[-1] == "record/_writing.py", chain
