"""The framework-neutral core: one event writer for every recorder (TensorBoard's
framing by default, a caller's record file byte for byte the same), new tag
layouts when a table's rows change, and DRIFT columns from sums that equal TF's
in-graph kernel."""

from __future__ import annotations

import numpy as np
import pytest

from tb_gradscope.core.drift import SUMS, drift_table
from tb_gradscope.core.writer import RecordWriter
from tb_gradscope.format import DRIFT_COLUMNS, Kind, make_info
from tb_gradscope.read.logdir import load_logdir


def _write(writer: RecordWriter) -> None:
    info = make_info(Kind.GRAD_STATS, "td", ["net", "net/a"], {"every_n_steps": 5})
    for step in (0, 5):
        writer.write_table(info, np.full((2, 5), step, np.float32), step)
    writer.write_blobs(make_info(Kind.EVENTS, "step"), [{"x": 1}], 5)
    writer.flush()


def test_a_callers_record_file_writes_the_same_bytes_as_the_default_framing(tmp_path, monkeypatch):
    import tensorflow as tf

    monkeypatch.setattr("time.time", lambda: 1700000000.0)
    ours = RecordWriter(str(tmp_path / "tb"))
    _write(ours)
    ours.close()
    theirs = RecordWriter(str(tmp_path / "tf"), open_records=tf.io.TFRecordWriter)
    _write(theirs)
    theirs.close()
    assert open(ours.path, "rb").read() == open(theirs.path, "rb").read()


def test_a_table_whose_rows_change_starts_a_new_tag_layout(tmp_path):
    writer = RecordWriter(str(tmp_path))
    first = make_info(Kind.CONFLICT, "a|b", ["x"], {"losses": ["a", "b"]})
    second = make_info(Kind.CONFLICT, "a|b", ["x", "y"], {"losses": ["a", "b"]})
    writer.write_table(first, [[0.5]], 0)
    writer.write_table(second, [[0.25], [-1.0]], 1)
    writer.close()
    (run,) = load_logdir(str(tmp_path))
    assert run.cosines[("a", "b")] == [(0, {"x": 0.5}), (1, {"x": 0.25, "y": -1.0})]


@pytest.mark.parametrize(
    "have_previous, have_recorded", [(True, True), (True, False), (False, False)]
)
def test_drift_columns_from_sums_equal_tfs_in_graph_kernel(have_previous, have_recorded):
    import tensorflow as tf

    from tb_gradscope.record._drift import drift_table as tf_drift_table

    rng = np.random.default_rng(0)
    sums = rng.uniform(0.0, 2.0, size=(4, len(SUMS)))
    sums[:, [3, 6]] -= 1.0  # the two dot products may be negative
    sums[2] = 0.0  # a scope where nothing moved: ratios are NaN
    counts = np.array([2.0, 1.0, 0.0, 3.0])
    ours = drift_table(sums, have_previous, counts, have_recorded)
    theirs = tf_drift_table(
        tf.constant(sums), tf.constant(have_previous), counts, tf.constant(have_recorded)
    ).numpy()
    assert ours.shape == (4, len(DRIFT_COLUMNS)) and ours.dtype == np.float32
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(theirs))
    np.testing.assert_allclose(ours, theirs, rtol=1e-6, equal_nan=True)


def test_the_fast_crc_is_tensorboards_masked_crc32c():
    from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import masked_crc32c as theirs

    from tb_gradscope.core.crc import masked_crc32c

    rng = np.random.default_rng(5)
    for size in [*range(0, 40), 255, 1000]:
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert masked_crc32c(data) == theirs(data), size
