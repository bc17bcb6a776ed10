"""The TF1 event file: TensorBoard's bytes (framing, CRCs, naming) written in C++,
on disk when a recorded step is complete, and the FlowGraph as soon as it is written."""

from __future__ import annotations

import io
import os
import re

import numpy as np
import tensorflow.compat.v1 as tf
from tensorboard.compat.proto import event_pb2
from tensorboard.summary.writer.record_writer import RecordWriter as TensorBoardRecords

from tb_gradscope.core.writer import RecordWriter
from tb_gradscope.format import Kind, make_info
from tb_gradscope.integrations.tf1 import GraphRecorder
from tests.support.tf1_support import multihead_feed, multihead_seed, read_records


def _records(data: bytes) -> list[bytes]:
    """The payloads of a TFRecord file, each read by its length field."""
    out, at = [], 0
    while at < len(data):
        length = int.from_bytes(data[at : at + 8], "little")
        out.append(data[at + 12 : at + 12 + length])
        at += 12 + length + 4
    return out


def _write_some(writer: RecordWriter) -> None:
    info = make_info(Kind.GRAD_STATS, "td", ["net", "net/a", "net/b"])
    rng = np.random.default_rng(3)
    for step in (0, 10, 20):
        writer.write_table(info, rng.normal(size=(3, len(info.columns))).astype(np.float32), step)
    writer.write_blobs(make_info(Kind.EVENTS, "rules"), [{"rule": "never(td, net/b)"}], 20)
    writer.flush()


def test_the_file_is_byte_for_byte_what_tensorboards_writer_makes_of_the_same_events(tmp_path):
    writer = RecordWriter(str(tmp_path))
    _write_some(writer)
    writer.close()
    with open(writer.path, "rb") as f:
        ours = f.read()
    payloads = _records(ours)
    assert len(payloads) == 5
    expected = io.BytesIO()
    framing = TensorBoardRecords(expected)  # TensorBoard's framing and pure-Python CRCs
    for payload in payloads:
        framing.write(payload)
    assert ours == expected.getvalue()
    first = event_pb2.Event.FromString(payloads[0])
    assert first.file_version == "brain.Event:2" and first.wall_time > 0
    assert [event_pb2.Event.FromString(p).step for p in payloads[1:]] == [0, 10, 20, 20]


def test_files_are_named_as_tensorboard_names_them_and_never_reused(tmp_path):
    first, second = (
        RecordWriter(str(tmp_path / "new" / "dir")),
        RecordWriter(str(tmp_path / "new" / "dir")),
    )
    pattern = rf"events\.out\.tfevents\.\d{{10}}\.[^/]+\.{os.getpid()}\.\d+\.gradscope"
    for writer in (first, second):
        assert re.fullmatch(pattern, os.path.basename(writer.path)), writer.path
    assert first.path != second.path
    _write_some(first)
    second.close()
    first.close()
    assert (
        len(_records(open(first.path, "rb").read())) == 5
    )  # the second writer did not truncate it


def test_records_are_on_disk_after_each_recorded_step_without_close(tmp_path):
    m = multihead_seed()
    rng = np.random.default_rng(0)
    with m.graph.as_default():
        gs = GraphRecorder(
            str(tmp_path),
            losses={"loss1": m.loss1, "loss2": m.loss2},
            train_ops={"loss1": m.train1, "loss2": m.train2},
            every_n_steps=5,
            rules=["never(loss1, Agent/layer2_2)"],
        )
        sess = gs.wrap(tf.Session())
        sess.run(tf.global_variables_initializer())
        for _ in range(7):
            feed = multihead_feed(m, rng)
            sess.run(m.train1, feed)
            sess.run(m.train2, feed)
        records = read_records(str(tmp_path))  # the recorder is still open
        assert [r.step for r in records[("grad_stats", "loss1")]] == [0, 5]
        assert [r.step for r in records[("update_stats", "")]] == [0, 5]
        assert [r.step for r in records[("flowgraph", "")]] == [0]
        sess.close()


def test_the_flowgraph_is_on_disk_after_the_first_train_call_even_when_its_step_is_not_recorded(
    tmp_path,
):
    graph = tf.Graph()
    with graph.as_default():
        global_step = tf.train.get_or_create_global_step()
        w = tf.get_variable("w", [2, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(tf.ones([4, 2]), w)))
        train = tf.train.GradientDescentOptimizer(0.1).minimize(loss, global_step=global_step)
        gs = GraphRecorder(
            str(tmp_path), losses={"mse": loss}, train_ops={"mse": train}, every_n_steps=10
        )
        sess = gs.wrap(tf.Session())
        sess.run(tf.global_variables_initializer())
        sess.run(global_step.assign(3))  # a resumed run: its first train call is step 3
        sess.run(train)
        records = read_records(str(tmp_path))
        assert [r.step for r in records[("flowgraph", "")]] == [3]
        assert ("grad_stats", "mse") not in records
        sess.close()
