"""What a GraphRecorder adds to each run call: nothing at unrecorded steps, no
extra `Session.run` at recorded ones (its two small calls are made callables),
and records whose bytes do not depend on these shortcuts."""

from __future__ import annotations

import numpy as np
import tensorflow.compat.v1 as tf
from tensorboard.util import tensor_util

from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.integrations.tf1 import flat_stats as flat
from tb_gradscope.integrations.tf1.writer import table_proto
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
    # steps 0 and 5 are recorded: their calls carry the tables; the others are the user's own
    for i, fetches in enumerate(spy.runs):
        step, own = divmod(i, 2)
        user = m.train1 if own == 0 else m.train2
        if step % 5:
            assert fetches is user
        else:
            assert isinstance(fetches, tuple) and fetches[0] is user and len(fetches[1]) == 1
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


def test_sums_without_the_pad_equal_the_padded_ones_when_no_variable_is_empty():
    graph = tf.Graph()
    with graph.as_default():
        parts = [
            tf.constant(np.random.default_rng(1).normal(size=s).astype(np.float32))
            for s in ([3, 2], [5], [1])
        ]
        before = [p * 0.5 for p in parts]
        assert not flat.may_be_empty(parts) and flat.may_be_empty([tf.zeros([0])] + parts)
        now, then = flat.flatten(parts, tf.float32), flat.flatten(before, tf.float32)
        ids = flat.segment_ids(parts)
        padded = flat.update_sums(now, then, ids, 3, pad=True)
        bare = flat.update_sums(now, then, ids, 3, pad=False)
        with tf.Session() as sess:
            a, b = sess.run([padded, bare])
    assert a.tobytes() == b.tobytes()
