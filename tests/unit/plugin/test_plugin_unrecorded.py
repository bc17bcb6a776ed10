"""The plugin's routes when a run did not record `max_abs` / `zero_frac`.

`Recorder(grad_columns=...)` may leave those two grad_stats columns out; they
then read NaN, which they never are when recorded. The matrix and series
routes serve such a value as null ("not recorded"), never as "NaN"; CSV
leaves the field empty; l2 and nonfinite stay as recorded (a NaN l2 is still
"NaN"); a violation's evidence leaves max_abs out. Real event files, read
through TensorBoard's Python data provider (docs/HTTP_API.md).
"""

from __future__ import annotations

import csv
import io
import json
import math
import pathlib

import numpy as np
import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import format as fmt
from tb_gradscope.plugin.plugin import GradscopePlugin
from tests.support import providers

PREFIX = "/data/plugin/gradscope/"
RUN = "unrecorded"
SCOPES = ("net", "net/a", "net/b")
STEPS = (0, 1, 2)
RULE = "never(fit, net/a)"
NAN = math.nan


def grad_rows(step: int) -> list[tuple[float, ...]]:
    """(grad_vars, l2, max_abs, nonfinite, zero_frac) per scope at `step`:
    net/a has neither max_abs nor zero_frac at steps 0 and 2 (only at 1),
    and a NaN gradient at step 2; net/b recorded both; net got no gradient."""
    a = (2.0, 0.5 + step, NAN, 0.0, NAN)
    if step == 1:
        a = (2.0, 1.5, 0.75, 0.0, 0.125)
    if step == 2:
        a = (2.0, NAN, NAN, 4.0, NAN)
    return [(0.0, 0.0, NAN, 0.0, NAN), a, (1.0, 0.25, 0.25, 0.0, 0.0)]


def _write(logdir: pathlib.Path) -> None:
    import tensorflow as tf

    info = fmt.make_info(fmt.Kind.GRAD_STATS, "fit", SCOPES, {"rules": [RULE]})
    writer = tf.summary.create_file_writer(str(logdir / RUN))
    with writer.as_default():
        for step in STEPS:
            tf.summary.write(
                fmt.tag_for(info.kind, info.name),
                tf.constant(fmt.encode_table(info, grad_rows(step))),
                step=step,
                metadata=fmt.create_summary_metadata(info),
            )
    writer.close()


@pytest.fixture(scope="module")
def client(tmp_path_factory) -> werkzeug_test.Client:
    logdir = tmp_path_factory.mktemp("unrecorded")
    _write(logdir)
    samples = {"gradscope": 10_000}
    provider = providers.python_provider(str(logdir), samples)
    plugin = GradscopePlugin(base_plugin.TBContext(data_provider=provider, sampling_hints=samples))
    return werkzeug_test.Client(application.TensorBoardWSGI([plugin]))


def _get(client, route: str, **params) -> str:
    response = client.get(PREFIX + route, query_string=params)
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_data(as_text=True)


def _f32(value: float) -> float:
    return float(np.float32(value))


def test_matrix_serves_an_unrecorded_max_abs_and_zero_frac_as_null(client):
    cells = json.loads(_get(client, "matrix", run=RUN, step="0"))["cells"]["fit"]
    grad_vars, l2, _, nonfinite, _ = grad_rows(0)[1]
    assert cells["net/a"] == {
        "state": "updates",
        "static_state": None,
        "grad_vars": int(grad_vars),
        "l2": _f32(l2),
        "max_abs": None,
        "nonfinite": nonfinite,
        "zero_frac": None,
        "violation": False,
    }
    _, l2, max_abs, _, zero_frac = grad_rows(0)[2]
    assert (cells["net/b"]["l2"], cells["net/b"]["max_abs"], cells["net/b"]["zero_frac"]) == (
        l2,
        max_abs,
        zero_frac,
    )
    assert cells["net"]["grad_vars"] == 0 and cells["net"]["max_abs"] is None


def test_a_nan_l2_stays_nan_beside_an_unrecorded_max_abs(client):
    cell = json.loads(_get(client, "matrix", run=RUN, step="2"))["cells"]["fit"]["net/a"]
    _, _, _, nonfinite, _ = grad_rows(2)[1]
    assert (cell["state"], cell["l2"], cell["nonfinite"]) == ("nonfinite", "NaN", nonfinite)
    assert cell["max_abs"] is None and cell["zero_frac"] is None


def test_matrix_csv_leaves_an_unrecorded_field_empty(client):
    rows = list(
        csv.DictReader(io.StringIO(_get(client, "matrix", run=RUN, step="0", format="csv")))
    )
    (a,) = [r for r in rows if r["scope"] == "net/a"]
    assert (a["max_abs"], a["zero_frac"]) == ("", "")
    assert (
        float(a["l2"]) == _f32(grad_rows(0)[1][1]) and float(a["nonfinite"]) == grad_rows(0)[1][3]
    )


@pytest.mark.parametrize("stat, column", [("max_abs", 2), ("zero_frac", 4)])
def test_series_of_an_optional_column_is_null_where_not_recorded(client, stat, column):
    served = json.loads(
        _get(client, "series", run=RUN, kind="grad_stats", name="fit", scope="net/a", stat=stat)
    )
    expected = [None if math.isnan(v := grad_rows(s)[1][column]) else _f32(v) for s in STEPS]
    assert [p[2] for p in served["points"]] == expected == [None, expected[1], None]
    rows = list(
        csv.DictReader(
            io.StringIO(
                _get(
                    client,
                    "series",
                    run=RUN,
                    kind="grad_stats",
                    name="fit",
                    scope="net/a",
                    stat=stat,
                    format="csv",
                )
            )
        )
    )
    assert [r["value"] for r in rows] == ["", str(expected[1]), ""]


def test_series_of_l2_keeps_its_nan(client):
    served = json.loads(
        _get(client, "series", run=RUN, kind="grad_stats", name="fit", scope="net/a", stat="l2")
    )
    assert [p[2] for p in served["points"]] == [
        _f32(grad_rows(0)[1][1]),
        _f32(grad_rows(1)[1][1]),
        "NaN",
    ]


def test_a_violation_over_the_logs_has_no_max_abs_evidence_where_none_was_recorded(client):
    served = json.loads(_get(client, "violations", run=RUN))
    (violation,) = served["violations"]
    assert (violation["name"], violation["scope"], violation["step"]) == (RULE, "net/a", 0)
    assert "max_abs" not in violation["evidence"]
    assert violation["evidence"]["l2"] == _f32(grad_rows(0)[1][1])
