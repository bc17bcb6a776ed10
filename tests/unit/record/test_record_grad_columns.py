"""`grad_columns=`: an optional gradient column left out reads NaN, "not recorded",
and every other value a step writes is bitwise what the full recorder writes.

Checked on the kernels (small tensors, one big enough for the finite/non-finite
cond, NaN and Inf, sparse and float16 gradients; the same kernel in a TF1
graph) and through every way of recording: a custom loop as
`tf.function`, `rec.function` and eager (two losses, conflict and a rule), the
Keras callback and the TF1 GraphRecorder.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS
from tb_gradscope.integrations.keras import GradscopeCallback
from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.record import Recorder
from tb_gradscope.record import _stats as stats
from tb_gradscope.record._reductions import BIG
from tb_gradscope.scopes import build_layout
from tests.support import keras_support
from tests.support.record_fixtures import batch, only, read_records, two_head_model, two_losses
from tests.support.tf1_support import multihead_feed, multihead_seed

COLUMNS = fmt.KIND_SPECS[fmt.Kind.GRAD_STATS].columns
LEFT_OUT = [(), ("max_abs",), ("zero_frac",)]


def _assert_only_left_out_differ(
    full: np.ndarray, partial: np.ndarray, kept: tuple[str, ...]
) -> None:
    """`partial` equals `full` bitwise except in the optional columns not `kept`, which are all NaN."""
    assert partial.shape == full.shape
    for i, column in enumerate(COLUMNS):
        if column in OPTIONAL_GRAD_COLUMNS and column not in kept:
            assert np.isnan(partial[:, i]).all(), f"{column} should read NaN (not recorded)"
            assert not np.isnan(full[:, i]).any(), f"{column} recorded is never NaN"
        else:
            np.testing.assert_array_equal(partial[:, i], full[:, i], err_msg=column)


def _gradients() -> list:
    rng = np.random.default_rng(0)
    big = rng.normal(size=(BIG + 7,)).astype(np.float32)
    big[::3] = 0.0
    small = rng.normal(size=(4, 3)).astype(np.float32)
    small[0] = 0.0
    bad = rng.normal(size=(5,)).astype(np.float32)
    bad[1], bad[3] = np.nan, -np.inf
    return [
        tf.constant(big),
        tf.constant(small),
        None,
        tf.constant(bad),
        tf.constant(rng.normal(size=(2, 2)).astype(np.float16)),
        tf.IndexedSlices(
            tf.constant(rng.normal(size=(3, 2)).astype(np.float32)),
            tf.constant([0, 2, 0]),
            tf.constant([5, 2]),
        ),
    ]


_NAMES = ["net/big/w", "net/small/w", "net/none/w", "net/bad/b", "head/w", "emb/table"]


@pytest.mark.parametrize("kept", LEFT_OUT)
@pytest.mark.parametrize("finite", [True, False], ids=["finite", "nonfinite"])
def test_the_kernel_leaves_out_only_what_it_is_told(kept, finite):
    rollup = stats.RollUp.from_layout(build_layout(_NAMES))
    grads = _gradients()
    if finite:
        grads[3] = tf.zeros([5])
    full = tf.function(lambda g: stats.grad_table(g, rollup))(grads).numpy()
    partial = tf.function(lambda g: stats.grad_table(g, rollup, kept))(grads).numpy()
    eager = stats.grad_table(grads, rollup, kept).numpy()
    _assert_only_left_out_differ(full, partial, kept)
    np.testing.assert_array_equal(eager, partial)
    nonfinite = dict(zip(build_layout(_NAMES).scopes, partial[:, COLUMNS.index("nonfinite")]))
    assert nonfinite["net/bad"] == (0 if finite else 2)  # counted whatever is left out


@pytest.mark.parametrize("kept", LEFT_OUT)
def test_in_a_tf1_graph_the_kernel_leaves_out_the_same_and_gives_the_eager_table(kept):
    rollup = stats.RollUp.from_layout(build_layout(_NAMES))
    eager = stats.grad_table(_gradients(), rollup, kept).numpy()
    graph = tf.Graph()
    with graph.as_default():
        grads = _gradients()
        ours = stats.grad_table(grads, rollup, kept)
        full = stats.grad_table(grads, rollup)
        with tf.compat.v1.Session(graph=graph) as sess:
            ours, full = sess.run([ours, full])
    _assert_only_left_out_differ(full, ours, kept)
    assert ours.tobytes() == eager.tobytes()


@pytest.mark.parametrize("bad", ["max_abs", ["l2"], ("zero_frac", "grad_vars"), None, 3])
def test_every_way_of_recording_refuses_a_bad_grad_columns(tmp_path, bad):
    with pytest.raises(ValueError, match="grad_columns"):
        Recorder(str(tmp_path), grad_columns=bad)
    with pytest.raises(ValueError, match="grad_columns"):
        GradscopeCallback(str(tmp_path), grad_columns=bad)
    m = multihead_seed()
    with m.graph.as_default(), pytest.raises(ValueError, match="grad_columns"):
        GraphRecorder(
            str(tmp_path),
            losses={"loss1": m.loss1},
            train_ops={"loss1": m.train1},
            grad_columns=bad,
        )


def _custom_loop(logdir: str, way: str, kept: tuple[str, ...] | None) -> dict:
    """Three recorded steps of a two-loss loop (conflict on, a rule that holds) written `way`."""
    model = two_head_model("net", seed=3)
    variables = model.trainable_variables
    opt = keras.optimizers.SGD(0.05)
    opt.build(variables)
    more = {} if kept is None else {"grad_columns": kept}
    rec = Recorder(logdir, every_n_steps=1, models=[model], rules=["never(b, net/trunk*)"], **more)

    def step(x, y):
        with rec.tape() as tape:
            losses = two_losses(model, x, y)
        rec.apply(opt, rec.gradients(tape, losses, variables))

    run = {"tf.function": tf.function(step), "rec.function": rec.function(step), "eager": step}[way]
    for i in range(3):
        run(*batch(i))
    rec.close()
    return only(read_records(logdir))


@pytest.mark.parametrize("way", ["tf.function", "rec.function", "eager"])
def test_a_custom_loop_writes_the_same_records_but_the_left_out_columns(tmp_path, way):
    full = _custom_loop(str(tmp_path / "full"), way, None)
    partial = _custom_loop(str(tmp_path / "partial"), way, ())
    assert set(partial) == set(full)
    assert {name for kind, name in full if kind == fmt.Kind.GRAD_STATS} == {"a", "b"}
    for key, by_step in full.items():
        assert sorted(partial[key]) == sorted(by_step), key
        if key[0] in (fmt.Kind.GRAD_STATS, fmt.Kind.UPDATE_STATS):
            assert sorted(by_step) == [0, 1, 2], key
        for step, record in by_step.items():
            if not isinstance(record, fmt.Table):
                continue
            if key[0] == fmt.Kind.GRAD_STATS:
                _assert_only_left_out_differ(record.values, partial[key][step].values, ())
            else:  # updates and conflict: untouched
                np.testing.assert_array_equal(
                    partial[key][step].values, record.values, err_msg=str(key)
                )


def test_the_keras_callback_leaves_out_the_columns(tmp_path):
    tables = {}
    for name, more in [("full", {}), ("partial", {"grad_columns": ("zero_frac",)})]:
        model = keras_support.two_output_model()
        keras_support.fit(
            model, [GradscopeCallback(str(tmp_path / name), every_n_batches=2, **more)]
        )
        tables[name] = {
            key: by_step
            for key, by_step in only(read_records(str(tmp_path / name))).items()
            if key[0] == fmt.Kind.GRAD_STATS
        }
    assert tables["full"] and set(tables["partial"]) == set(tables["full"])
    for key, by_step in tables["full"].items():
        assert sorted(tables["partial"][key]) == sorted(by_step)
        for step, record in by_step.items():
            _assert_only_left_out_differ(
                record.values, tables["partial"][key][step].values, ("zero_frac",)
            )


def test_the_tf1_recorder_leaves_out_the_columns(tmp_path):
    tables = {}
    for name, more in [("full", {}), ("partial", {"grad_columns": ()})]:
        m = multihead_seed()
        rng = np.random.default_rng(0)
        with m.graph.as_default():
            gs = GraphRecorder(
                str(tmp_path / name),
                losses={"loss1": m.loss1, "loss2": m.loss2},
                train_ops={"loss1": m.train1, "loss2": m.train2},
                every_n_steps=2,
                **more,
            )
            with tf.compat.v1.Session() as sess:
                sess = gs.wrap(sess)
                sess.run(tf.compat.v1.global_variables_initializer())
                for _ in range(4):
                    feed = multihead_feed(m, rng)
                    sess.run(m.train1, feed)
                    sess.run(m.train2, feed)
            gs.close()
        tables[name] = {
            key: by_step
            for key, by_step in only(read_records(str(tmp_path / name))).items()
            if key[0] == fmt.Kind.GRAD_STATS
        }
    assert set(tables["full"]) == {(fmt.Kind.GRAD_STATS, "loss1"), (fmt.Kind.GRAD_STATS, "loss2")}
    assert set(tables["partial"]) == set(tables["full"])
    for key, by_step in tables["full"].items():
        assert sorted(tables["partial"][key]) == sorted(by_step) == [0, 2]
        for step, record in by_step.items():
            _assert_only_left_out_differ(record.values, tables["partial"][key][step].values, ())
