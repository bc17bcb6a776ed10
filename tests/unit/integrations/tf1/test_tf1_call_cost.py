"""What a GraphRecorder adds to each run call: nothing at unrecorded steps, no
extra `Session.run` at recorded ones (its two small calls are made callables),
and records whose bytes do not depend on these shortcuts."""

from __future__ import annotations

import numpy as np
import tensorflow.compat.v1 as tf
from tensorboard.util import tensor_util

from tb_gradscope.core.writer import table_proto
from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.record import _stats as stats
from tb_gradscope.record._reductions import Segments
from tests.support.tf1_support import multihead_feed, multihead_seed, read_records


class SpySession:
    """A session that logs every run call's fetches and every callable made and called."""

    def __init__(self, session):
        self._session = session
        self.graph = session.graph
        self.runs: list = []
        self.made: list = []
        self.called: list = []

    def run(self, fetches, feed_dict=None, options=None, run_metadata=None):
        self.runs.append(fetches)
        return self._session.run(fetches, feed_dict, options, run_metadata)

    def make_callable(self, fetches):
        self.made.append(fetches)
        call = self._session.make_callable(fetches)

        def counted():
            self.called.append(fetches)
            return call()

        return counted


def _train(logdir: str, steps: int, every: int):
    m = multihead_seed()
    rng = np.random.default_rng(5)
    with m.graph.as_default():
        raw = tf.Session()
        raw.run(tf.global_variables_initializer())
        spy = SpySession(raw)
        gs = GraphRecorder(
            logdir,
            losses={"loss1": m.loss1, "loss2": m.loss2},
            train_ops={"loss1": m.train1, "loss2": m.train2},
            every_n_steps=every,
        )
        sess = gs.wrap(spy)
        for _ in range(steps):
            feed = multihead_feed(m, rng)
            sess.run(m.train1, feed)
            sess.run(m.train2, feed)
        gs.close()
        raw.close()
    return m, spy


def test_unrecorded_calls_run_the_users_fetches_and_nothing_else(tmp_path):
    m, spy = _train(str(tmp_path), steps=10, every=5)
    # steps 0 and 5 are recorded: their calls carry the tables (the step's first call also
    # the loss1|loss2 conflict, both losses fed there); the others are the user's own
    for i, fetches in enumerate(spy.runs):
        step, own = divmod(i, 2)
        user = m.train1 if own == 0 else m.train2
        if step % 5:
            assert fetches is user
        else:
            tables = 2 if own == 0 else 1
            assert isinstance(fetches, tuple) and fetches[0] is user and len(fetches[1]) == tables
    assert [r.step for r in read_records(str(tmp_path))[("grad_stats", "loss1")]] == [0, 5]


def test_a_recorded_step_adds_no_run_call_and_makes_its_two_callables_once(tmp_path):
    _, spy = _train(str(tmp_path), steps=10, every=5)
    assert len(spy.runs) == 20  # one per user call
    assert len(spy.made) == 2  # the snapshot and the update table, made once
    assert len(spy.called) == 4  # each called once per recorded step (0 and 5)
    assert [r.step for r in read_records(str(tmp_path))[("update_stats", "")]] == [0, 5]


def test_table_protos_are_make_tensor_proto_byte_for_byte():
    rng = np.random.default_rng(0)
    for shape in [(1, 2), (4, 5), (37, 2), (0, 5), (1, 1)]:
        values = rng.normal(size=shape).astype(np.float32)
        assert (
            table_proto(values).SerializeToString()
            == tensor_util.make_tensor_proto(values).SerializeToString()
        )


def test_sums_beside_an_empty_variable_are_bitwise_those_without_it():
    """An empty tensor takes the unsorted segment kernels (every segment gets
    its row); the others' sums are bitwise those of the sorted kernels."""
    graph = tf.Graph()
    with graph.as_default():
        parts = [
            tf.constant(np.random.default_rng(1).normal(size=s).astype(np.float32))
            for s in ([3, 2], [5], [1])
        ]
        bare, padded = Segments(parts), Segments(parts + [tf.zeros([0])])
        assert "SegmentSum" in {op.type for op in _ops_of(bare.sum(bare.flat))}
        sums = [stats.update_sums(s, s.flat * 0.5) for s in (bare, padded)]
        with tf.Session() as sess:
            a, b = sess.run(sums)
    assert b.shape == (4, 2) and not b[3].any()
    assert a.tobytes() == b[:3].tobytes()


def _ops_of(tensor) -> set:
    seen, todo = set(), [tensor.op]
    while todo:
        op = todo.pop()
        if op not in seen:
            seen.add(op)
            todo.extend(t.op for t in op.inputs)
    return seen
