"""What GraphRecorder says when it is given the wrong things, or loses its logdir."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from tb_gradscope.core.warn import GradscopeWarning
from tb_gradscope.integrations.tf1 import GraphRecorder, StartPoint
from tests.support.tf1_support import multihead_feed, multihead_seed


@pytest.fixture(scope="module")
def seed01():
    return multihead_seed()


def test_non_scalar_loss_is_refused_with_the_fix(seed01, tmp_path):
    refused = pytest.raises(ValueError, match=r"loss 'y1' is not a scalar.*reduce_mean")
    with seed01.graph.as_default(), refused:
        GraphRecorder(str(tmp_path), losses={"y1": seed01.y1}, train_ops={"y1": seed01.train1})


def test_train_ops_must_be_keyed_by_loss(seed01, tmp_path):
    refused = pytest.raises(ValueError, match=r"\['train1'\], which are not losses")
    with seed01.graph.as_default(), refused:
        GraphRecorder(
            str(tmp_path), losses={"loss1": seed01.loss1}, train_ops={"train1": seed01.train1}
        )


def test_train_ops_are_required(seed01, tmp_path):
    with seed01.graph.as_default(), pytest.raises(ValueError, match="needs train_ops"):
        GraphRecorder(str(tmp_path), losses={"loss1": seed01.loss1}, train_ops={})


def test_start_point_gradients_must_match_the_tensor(seed01, tmp_path):
    with seed01.graph.as_default(), pytest.raises(ValueError, match="output_gradients have shape"):
        GraphRecorder(
            str(tmp_path),
            losses={"head": StartPoint(seed01.y1, tf.ones([3, 2]))},
            train_ops={"head": seed01.train1},
        )


def test_variables_of_another_graph_are_refused(seed01, tmp_path):
    other = multihead_seed()
    with seed01.graph.as_default(), pytest.raises(ValueError, match="belongs to another graph"):
        GraphRecorder(
            str(tmp_path),
            losses={"loss1": seed01.loss1},
            train_ops={"loss1": seed01.train1},
            variables=[other.w1],
        )


def test_deleted_logdir_is_reported_once(tmp_path):
    m = multihead_seed()
    logdir = tmp_path / "logs"
    rng = np.random.default_rng(0)
    with m.graph.as_default():
        gs = GraphRecorder(
            str(logdir), losses={"loss1": m.loss1}, train_ops={"loss1": m.train1}, every_n_steps=1
        )
        with gs.wrap(tf.Session()) as sess:
            sess.run(tf.global_variables_initializer())
            sess.run(m.train1, multihead_feed(m, rng))
            shutil.rmtree(logdir)
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                for _ in range(3):
                    sess.run(m.train1, multihead_feed(m, rng))
    gone = [w for w in caught if issubclass(w.category, GradscopeWarning)]
    assert len(gone) == 1 and "is gone" in str(gone[0].message)
    assert not gs.disabled  # recording goes on; only the file is missing


def _bad_arguments(m) -> list:
    good = dict(losses={"loss1": m.loss1}, train_ops={"loss1": m.train1})
    return [
        (
            dict(good, logdir=None),
            r"logdir must be a directory path \(str or os.PathLike\), got NoneType",
        ),
        (dict(good, losses=[m.loss1]), r"losses must be a dict \{name: loss tensor\}, got list"),
        (
            dict(good, train_ops=m.train1),
            r"train_ops must be a dict \{loss name: train op\}, got Operation",
        ),
        (dict(good, every_n_steps=0), r"every_n_steps must be an int >= 1 .*got 0"),
        (dict(good, every_n_steps=True), r"every_n_steps must be an int >= 1 .*got True"),
        (
            dict(good, variables=m.w1),
            r"variables must be a list of tf.Variable, got (ResourceVariable|RefVariable)",
        ),
        (
            dict(good, variables=[m.w1, m.s]),
            r"variables must hold only tf.Variable objects, got SymbolicTensor",
        ),
        (
            dict(good, scopes={"max_depth": 2}),
            r"scopes must be a tb_gradscope.scopes.ScopeSpec, got dict",
        ),
        (
            dict(good, pairs="Actor/target"),
            r"pairs takes \{target_scope: online_scope\} or a list of Pair, got str",
        ),
        (dict(good, analyze="yes"), r"analyze must be True or False, got 'yes'"),
        (
            dict(good, rules=["nevr(loss1, Agent)"]),
            r"rules: cannot read rule 'nevr\(loss1, Agent\)'",
        ),
        (dict(good, rules=[3]), r"rules must be tb_gradscope.rules objects or strings"),
        (
            dict(good, rules=["never(loss1, Agent/layer2_2)"], on_violation="loud"),
            r"on_violation is 'loud'; use one of log, warn, raise",
        ),
        (
            dict(good, rules=["never(loss1, Agent/layer2_2)"], analyze=False),
            r"rules need the static analysis \(analyze=True\)",
        ),
    ]


def test_each_bad_argument_is_refused_by_name(seed01, tmp_path):
    for kwargs, message in _bad_arguments(seed01):
        kwargs.setdefault("logdir", str(tmp_path))
        with seed01.graph.as_default(), pytest.raises(ValueError, match=message):
            GraphRecorder(**kwargs)


def test_pair_prefixes_says_targets_exist_but_are_not_trainable():
    import tensorflow as tf

    from tb_gradscope.pairs import pair_prefixes

    v1 = tf.compat.v1
    graph = tf.Graph()
    with graph.as_default():
        with v1.variable_scope("Actor/eval"):
            v1.get_variable("w", [2, 2])
        with v1.variable_scope("Actor/target"):
            v1.get_variable("w", [2, 2], trainable=False)
        with pytest.raises(
            ValueError, match=r"1 variable\(s\) exist under scope 'Actor/target'.*not trainable"
        ):
            pair_prefixes(v1.trainable_variables(), "Actor/target", "Actor/eval")
        pair = pair_prefixes(v1.global_variables(), "Actor/target", "Actor/eval")
        assert pair.target_names == ("Actor/target/w",)
