"""DriftMonitor: what it writes, when, and that it never changes training."""

from __future__ import annotations

import glob
import subprocess
import sys
import warnings

import numpy as np
import pytest
import tensorflow as tf
from tensorboard.backend.event_processing import event_file_loader

from tb_gradscope import format as fmt
from tb_gradscope.core.warn import GradscopeWarning
from tb_gradscope.format import DRIFT_COLUMNS
from tb_gradscope.pairs import Pair, pair_prefixes
from tb_gradscope.read import anomalies
from tb_gradscope.record import DriftMonitor
from tb_gradscope.record._writing import NoWriterError, SummarySink
from tests.support import pairs_support as ps


def _variables(seed: int = 0):
    rng = np.random.default_rng(seed)
    out = {}
    for scope in ("online", "target"):
        with tf.name_scope(scope):
            out[scope] = [
                tf.Variable(rng.normal(size=(3, 4)).astype(np.float32), name="l1/w"),
                tf.Variable(rng.normal(size=(4,)).astype(np.float32), name="l1/b"),
                tf.Variable(rng.normal(size=(4, 2)).astype(np.float32), name="l2/w"),
            ]
    for t, o in zip(out["target"], out["online"]):
        t.assign(o)
    return out["target"], out["online"]


def _drive(monitor, target, online, steps, tau, seed=1, wrap=lambda f: f):
    """Random-walks online, EMAs the target, records; returns values seen per step."""
    rng = np.random.default_rng(seed)
    noise = [
        [tf.constant(rng.normal(size=v.shape).astype(np.float32) * 0.05) for v in online]
        for _ in range(steps)
    ]

    def one(moves):
        for v, m in zip(online, moves):
            v.assign_add(m)
        for t, o in zip(target, online):
            t.assign((1.0 - tau) * t + tau * o)
        monitor.record()

    one = wrap(one)
    seen = {0: ([t.numpy() for t in target], [o.numpy() for o in online])}
    monitor.record()
    for i in range(steps):
        one(noise[i])
        seen[i + 1] = ([t.numpy() for t in target], [o.numpy() for o in online])
    monitor.flush()
    return seen


def _norm(arrays):
    return float(np.sqrt(sum(float(np.sum(a.astype(np.float64) ** 2)) for a in arrays)))


def test_columns_match_numpy_and_tau_is_exact_for_ema(tmp_path):
    target, online = _variables()
    monitor = DriftMonitor(
        [pair_prefixes(target + online, "target", "online")], logdir=str(tmp_path), every_n_steps=4
    )
    seen = _drive(monitor, target, online, steps=12, tau=0.3)
    (record,) = ps.read_drift(str(tmp_path)).values()
    assert record.steps == [0, 4, 8, 12]
    assert record.info.columns == DRIFT_COLUMNS
    for step, table in zip(record.steps, record.tables):
        t_now, o_now = seen[step]
        row = table.row("target")
        distance = _norm([t - o for t, o in zip(t_now, o_now)])
        assert row["distance"] == pytest.approx(distance, rel=1e-5)
        assert row["drift"] == pytest.approx(distance / _norm(o_now), rel=1e-5)
        if step == 0:
            assert np.isnan(row["tau"]) and np.isnan(row["target_step"])
            continue
        t_prev, o_prev = seen[step - 1]
        assert row["target_step"] == pytest.approx(
            _norm([a - b for a, b in zip(t_now, t_prev)]), rel=1e-5
        )
        assert row["online_step"] == pytest.approx(
            _norm([a - b for a, b in zip(o_now, o_prev)]), rel=1e-5
        )
        assert row["tau"] == pytest.approx(0.3, abs=1e-5)
        assert table.row("target/l1")["tau"] == pytest.approx(0.3, abs=1e-5)


def test_eager_and_tf_function_write_the_same_tables(tmp_path):
    results = []
    for mode, wrap in (("eager", lambda f: f), ("graph", tf.function)):
        target, online = _variables()
        logdir = str(tmp_path / mode)
        monitor = DriftMonitor(
            [pair_prefixes(target + online, "target", "online")], logdir=logdir, every_n_steps=3
        )
        _drive(monitor, target, online, steps=9, tau=0.1, wrap=wrap)
        (record,) = ps.read_drift(logdir).values()
        results.append(record)
    eager, graph = results
    assert eager.steps == graph.steps == [0, 3, 6, 9]
    for a, b in zip(eager.tables, graph.tables):
        np.testing.assert_allclose(a.values, b.values, rtol=1e-6, equal_nan=True)


def test_declared_every_says_what_to_expect_not_when_to_record(tmp_path):
    target, online = _variables()
    pair = pair_prefixes(target + online, "target", "online", every=7)
    monitor = DriftMonitor([pair], logdir=str(tmp_path), every_n_steps=5)
    _drive(monitor, target, online, steps=21, tau=0.2)
    (record,) = ps.read_drift(str(tmp_path)).values()
    assert record.steps == [0, 5, 10, 15, 20]
    assert all(np.isfinite(t.row("target")["tau"]) for t in record.tables[1:])
    assert record.info.attrs["every"] == 7


def test_full_metadata_only_on_the_first_event_of_the_tag(tmp_path):
    target, online = _variables()
    monitor = DriftMonitor(
        [pair_prefixes(target + online, "target", "online")], logdir=str(tmp_path), every_n_steps=2
    )
    _drive(monitor, target, online, steps=6, tau=0.5, wrap=tf.function)
    (path,) = glob.glob(str(tmp_path / "*tfevents*"))
    metadata = [
        value.metadata.plugin_data.content
        for event in event_file_loader.EventFileLoader(path).Load()
        for value in event.summary.value
    ]
    assert len(metadata) == 4
    assert metadata[0] and not any(metadata[1:])
    assert fmt.parse_plugin_content(metadata[0]).name == "target<-online"


@pytest.mark.slow
def test_recording_never_changes_training(tmp_path):
    finals = []
    for with_monitor in (False, True):
        target, online = ps.mlp("target", seed=1), ps.mlp("online", seed=2)
        ps.sync(target, online)

        def pairs_of(t, o):
            return [pair_prefixes([], "target", "online", models=[t, o])]

        run = ps.train(
            str(tmp_path / str(with_monitor)),
            target,
            online,
            pairs_of,
            ps.ema_update(0.05),
            steps=30,
            every_n_steps=3 if with_monitor else 10**9,
        )
        finals.append([v.numpy() for v in run.target.weights + run.online.weights])
    for a, b in zip(*finals):
        np.testing.assert_array_equal(a, b)


def test_shared_step_variable_is_read_not_advanced(tmp_path):
    target, online = _variables()
    step = tf.Variable(40, dtype=tf.int64)
    monitor = DriftMonitor(
        [pair_prefixes(target + online, "target", "online")],
        logdir=str(tmp_path),
        every_n_steps=10,
        step=step,
    )
    monitor.record()
    monitor.flush()
    assert int(step.numpy()) == 40
    (record,) = ps.read_drift(str(tmp_path)).values()
    assert record.steps == [40]


def test_failure_inside_monitoring_warns_once_and_training_continues(tmp_path):
    words = [tf.Variable(["a", "b"]), tf.Variable(["c", "d"])]
    pair = Pair("t<-o", (words[0],), (words[1],), ("t/w",), ("o/w",), (False,), "t", "o")
    monitor = DriftMonitor([pair], logdir=str(tmp_path), every_n_steps=1)
    with pytest.warns(GradscopeWarning, match=r"DriftMonitor 'drift' stopped recording"):
        monitor.record()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            monitor.record()  # steps aside silently
    assert int(monitor.step.numpy()) == 4


def test_no_writer_is_a_clear_error():
    target, online = _variables()
    monitor = DriftMonitor([pair_prefixes(target + online, "target", "online")])
    with pytest.raises(NoWriterError, match=r"create_file_writer"):
        monitor.record()


def test_default_writer_is_used_when_no_logdir(tmp_path):
    target, online = _variables()
    monitor = DriftMonitor([pair_prefixes(target + online, "target", "online")], every_n_steps=1)
    writer = tf.summary.create_file_writer(str(tmp_path))
    with writer.as_default():
        monitor.record()
        monitor.record()
    writer.close()
    (record,) = ps.read_drift(str(tmp_path)).values()
    assert record.steps == [0, 1]


def test_read_side_never_imports_tensorflow():
    code = (
        "import sys\nimport tb_gradscope.read.anomalies, tb_gradscope.read.drift, tb_gradscope.pairs\n"
        "print(','.join(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_monitors_sharing_a_sink_write_one_event_file(tmp_path):
    sink = SummarySink(str(tmp_path), "shared")
    target, online = _variables()
    first = DriftMonitor(
        [pair_prefixes(target + online, "target", "online", name="a")], every_n_steps=1, sink=sink
    )
    second = DriftMonitor(
        [pair_prefixes(target + online, "target", "online", name="b")], every_n_steps=1, sink=sink
    )
    for monitor in (first, second):
        monitor.record()
    sink.flush()
    assert len(glob.glob(str(tmp_path / "*tfevents*"))) == 1
    assert sorted(ps.read_drift(str(tmp_path))) == ["a", "b"]
    with pytest.raises(ValueError, match="either logdir or sink"):
        DriftMonitor(first.pairs, logdir=str(tmp_path), sink=sink)


def test_checkpoint_saves_only_the_step_and_a_restored_monitor_continues(tmp_path):
    target, online = _variables()
    pair = pair_prefixes(target + online, "target", "online")
    monitor = DriftMonitor([pair], logdir=str(tmp_path / "a"), every_n_steps=1)
    for _ in range(3):
        monitor.record()
    path = tf.train.Checkpoint(monitor=monitor).save(str(tmp_path / "ckpt"))
    saved = [name for name, _ in tf.train.list_variables(path)]
    assert [n for n in saved if "monitor" in n] == ["monitor/step/.ATTRIBUTES/VARIABLE_VALUE"]
    resumed = DriftMonitor([pair], logdir=str(tmp_path / "b"), every_n_steps=1)
    tf.train.Checkpoint(monitor=resumed).restore(path).assert_existing_objects_matched()
    resumed.record()
    resumed.flush()
    (record,) = ps.read_drift(str(tmp_path / "b")).values()
    assert record.steps == [3]


def test_variables_declared_written_by_an_optimizer_are_counted_per_scope(tmp_path):
    target, online = _variables()
    monitor = DriftMonitor(
        [pair_prefixes(target + online, "target", "online")], logdir=str(tmp_path), every_n_steps=2
    )
    monitor.note_optimizer_variables(target[:2])  # what a Recorder's apply() saw
    _drive(monitor, target, online, steps=6, tau=0.2)
    (record,) = ps.read_drift(str(tmp_path)).values()
    assert list(record.column("target/l1", "optimizer_vars")) == [2.0] * 4
    assert list(record.column("target/l2", "optimizer_vars")) == [0.0] * 4
    events = anomalies.find_anomalies(
        record.info.name, record.info.attrs, record.steps, record.tables
    )
    assert [(e.name, e.step, e.evidence["optimizer_scopes"]) for e in events] == [
        (anomalies.MOVED_BY_OPTIMIZER, 0, ["target/l1"])
    ]


def test_the_old_drift_monitor_import_names_where_it_moved():
    import tb_gradscope.pairs

    with pytest.raises(AttributeError, match="from tb_gradscope import DriftMonitor"):
        tb_gradscope.pairs.DriftMonitor  # noqa: B018
