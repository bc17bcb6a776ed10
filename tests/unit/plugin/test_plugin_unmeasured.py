"""The matrix route when a TF1 step's update was not measured.

The TF1 recorder writes a step's `update_stats` before a train op run later
at that step (train ops in long blocks): the scopes that op writes read
`update_norm` NaN beside a finite `weight_norm`, meaning "not measured"
(docs/FORMAT.md). The route marks such a scope `"measured": false`, so the
tab says "not measured" instead of "NaN"; a scope whose weights went
non-finite (both norms NaN) was measured and stays "NaN". Real event files,
read through TensorBoard's Python data provider (docs/HTTP_API.md).
"""

from __future__ import annotations

import json
import math
import pathlib

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import format as fmt
from tb_gradscope.plugin.plugin import GradscopePlugin
from tests.support import providers

PREFIX = "/data/plugin/gradscope/"
RUN = "ppo"
SCOPES = ("actor", "critic", "diverged")
NAN = math.nan
# (update_norm, weight_norm) per scope: the actor measured, the critic's
# train op ran after the step was written, `diverged` measured as NaN weights.
UPDATES = {"actor": (0.25, 2.0), "critic": (NAN, 1.5), "diverged": (NAN, NAN)}


def _write(logdir: pathlib.Path) -> None:
    import tensorflow as tf

    grads = fmt.make_info(fmt.Kind.GRAD_STATS, "closs", SCOPES)
    updates = fmt.make_info(fmt.Kind.UPDATE_STATS, "", SCOPES)
    writer = tf.summary.create_file_writer(str(logdir / RUN))
    with writer.as_default():
        for info, rows in (
            (grads, [(1.0, 0.5, 0.5, 0.0, 0.0)] * len(SCOPES)),
            (updates, [UPDATES[s] for s in SCOPES]),
        ):
            tf.summary.write(
                fmt.tag_for(info.kind, info.name),
                tf.constant(fmt.encode_table(info, rows)),
                step=40,
                metadata=fmt.create_summary_metadata(info),
            )
    writer.close()


@pytest.fixture(scope="module")
def updates(tmp_path_factory) -> dict:
    logdir = tmp_path_factory.mktemp("unmeasured")
    _write(logdir)
    samples = {"gradscope": 10_000}
    provider = providers.python_provider(str(logdir), samples)
    plugin = GradscopePlugin(base_plugin.TBContext(data_provider=provider, sampling_hints=samples))
    client = werkzeug_test.Client(application.TensorBoardWSGI([plugin]))
    response = client.get(PREFIX + "matrix", query_string={"run": RUN, "step": "40"})
    assert response.status_code == 200, response.get_data(as_text=True)
    return json.loads(response.get_data(as_text=True))["updates"]


def test_an_update_not_measured_is_marked_so(updates):
    assert updates["critic"] == {
        "update_norm": "NaN",
        "weight_norm": 1.5,
        "ratio": "NaN",
        "measured": False,
    }


def test_a_measured_update_says_measured(updates):
    assert updates["actor"] == {
        "update_norm": 0.25,
        "weight_norm": 2.0,
        "ratio": 0.125,
        "measured": True,
    }


def test_weights_gone_non_finite_are_a_measured_nan(updates):
    """NaN in both norms is what an update that made the weights NaN measures."""
    assert updates["diverged"]["update_norm"] == "NaN"
    assert updates["diverged"]["measured"] is True
