"""DRIFT records with only the format's required columns still give modes and anomalies.

Readers look columns up by name, so a record written without the monitor's
extra columns (another writer, or an older one) must still be read: the
update mode from each row's own tau, and never_synced from drift.
"""

from __future__ import annotations

import keras
import numpy as np
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope.format import DRIFT_EXTRA_COLUMNS
from tb_gradscope.pairs import pair_models
from tb_gradscope.read import anomalies
from tb_gradscope.read.drift import update_mode
from tests.support import pairs_support as ps


def _rewrite_with_required_columns(record, logdir: str) -> None:
    info = fmt.make_info(fmt.Kind.DRIFT, record.info.name, record.info.scopes, record.info.attrs)
    assert not set(DRIFT_EXTRA_COLUMNS) & set(info.columns)
    writer = tf.summary.create_file_writer(logdir)
    with writer.as_default():
        for i, (step, table) in enumerate(zip(record.steps, record.tables)):
            values = np.stack([table.column(c) for c in info.columns], axis=1)
            tf.summary.write(
                fmt.tag_for(fmt.Kind.DRIFT, info.name),
                fmt.encode_table(info, values),
                step=step,
                metadata=fmt.create_summary_metadata(info).SerializeToString() if i == 0 else b"",
            )
    writer.close()


def test_required_columns_alone_give_mode_and_never_synced(tmp_path):
    online = ps.mlp("online", seed=2)
    target = keras.models.clone_model(online)
    target.name = "target"
    run = ps.train(
        str(tmp_path / "full"),
        target,
        online,
        lambda t, o: [pair_models(t, o)],
        ps.ema_update(0.05),
        steps=40,
    )
    (full,) = ps.read_drift(run.logdir).values()
    _rewrite_with_required_columns(full, str(tmp_path / "lean"))
    (lean,) = ps.read_drift(str(tmp_path / "lean")).values()
    assert set(lean.info.columns) == set(fmt.KIND_SPECS[fmt.Kind.DRIFT].columns)
    _, _, series = anomalies.pair_series(lean.info.attrs, lean.tables, lean.steps)
    mode = update_mode(series)
    assert mode.kind == "ema" and mode.tau == pytest.approx(0.05, rel=0.01)
    events = anomalies.find_anomalies(lean.info.name, lean.info.attrs, lean.steps, lean.tables)
    assert [e.name for e in events] == [anomalies.NEVER_SYNCED]
    full_events = anomalies.find_anomalies(full.info.name, full.info.attrs, full.steps, full.tables)
    assert events == full_events
