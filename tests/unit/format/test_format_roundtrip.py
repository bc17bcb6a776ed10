"""Every record kind survives write -> TensorBoard ingestion -> decode, exactly.

Records are written the way the recorder writes them (tf.summary.write with the
full metadata on a tag's first event and none after) and read back through both
of TensorBoard's data providers: the Python multiplexer and the Rust data server.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import tensorflow as tf
from tensorboard import context as tb_context

from tb_gradscope import format as fmt
from tests.support import providers

RUN = "run_a"
STEPS = (0, 5, 10)
HOSTILE = "<img src=x onerror=alert(1)>/“quoted” נ/NaN"
SCOPES = ("online", "online/l1", "target", "target/l1", HOSTILE)


def _table(kind: fmt.Kind, step: int) -> np.ndarray:
    columns = len(fmt.KIND_SPECS[kind].columns)
    values = (
        np.arange(len(SCOPES) * columns, dtype=np.float32).reshape(len(SCOPES), columns)
        * (step + 1)
        / 7.0
    )
    values[0, 0] = np.nan
    values[1, -1] = np.inf
    values[2, -1] = -np.inf
    return values


def _flowgraph() -> fmt.FlowGraph:
    return fmt.FlowGraph(
        losses=[fmt.LossInfo(name="td"), fmt.LossInfo("q_out", "start_point", "q:0")],
        scopes=list(SCOPES),
        cells={
            "td": {s: fmt.UPDATES if s.startswith("online") else fmt.BLOCKED for s in SCOPES},
            "q_out": {s: fmt.INDEPENDENT for s in SCOPES},
        },
        blocked_edges=[
            fmt.BlockedEdge(
                loss="td",
                producer="target/q/MatMul",
                consumer="StopGradient",
                op_name="StopGradient",
                op_type="StopGradient",
                cause="stop_gradient",
                producer_scope="target/l1",
                consumer_scope="loss:td",
                source=fmt.SourceLine("train.py", 42, "train_step"),
            )
        ],
        nodes=[fmt.GraphNode("online/l1", "scope", "online/l1")],
        edges=[fmt.GraphEdge("target/l1", "loss:td", 2, ("td",))],
        applied=["online", "online/l1"],
        source="tf2",
    )


def _events(step: int) -> list[fmt.Event]:
    return [
        fmt.Event(
            type=fmt.VIOLATION,
            name="never(td, target/*)",
            step=step,
            message=f"td reached {HOSTILE}",
            loss="td",
            scope=HOSTILE,
            evidence={"l2": float("nan"), "ratio": float("inf"), "op": "NaN"},
        ),
        fmt.Event(type=fmt.ANOMALY, name="never_synced", step=step, message="m", pair="p"),
    ]


TABLE_RECORDS = [
    fmt.make_info(fmt.Kind.GRAD_STATS, "td", SCOPES),
    fmt.make_info(fmt.Kind.GRAD_STATS, HOSTILE, SCOPES),
    fmt.make_info(fmt.Kind.UPDATE_STATS, "", SCOPES),
    fmt.make_info(
        fmt.Kind.DRIFT, "target<-online", SCOPES, {"target": "target", "online": "online"}
    ),
    fmt.make_info(fmt.Kind.CONFLICT, "td|aux", SCOPES, {"losses": ["td", "aux"]}),
]
FLOWGRAPH = fmt.make_info(fmt.Kind.FLOWGRAPH)
EVENTS = fmt.make_info(fmt.Kind.EVENTS)


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("format_roundtrip")
    writer = tf.summary.create_file_writer(str(root / RUN))
    with writer.as_default():
        for i, step in enumerate(STEPS):

            def metadata(info):
                # Full metadata on a tag's first event only, as the recorder does.
                return fmt.create_summary_metadata(info).SerializeToString() if i == 0 else b""

            for info in TABLE_RECORDS:
                tf.summary.write(
                    fmt.tag_for(info.kind, info.name),
                    fmt.encode_table(info, _table(info.kind, step)),
                    step=step,
                    metadata=metadata(info),
                )
            tf.summary.write(
                fmt.tag_for(fmt.Kind.FLOWGRAPH),
                tf.constant(fmt.encode_blobs(FLOWGRAPH, [_flowgraph().to_json()])),
                step=step,
                metadata=metadata(FLOWGRAPH),
            )
            tf.summary.write(
                fmt.tag_for(fmt.Kind.EVENTS),
                tf.constant(fmt.encode_blobs(EVENTS, [e.to_json() for e in _events(step)])),
                step=step,
                metadata=metadata(EVENTS),
            )
    writer.close()
    return str(root)


@pytest.fixture(scope="module", params=["python", "rust"])
def data_provider(request, logdir):
    if request.param == "python":
        yield providers.python_provider(logdir)
        return
    with providers.rust_provider(logdir) as rust:
        _wait_for_tags(rust, len(TABLE_RECORDS))
        yield rust


def _wait_for_tags(data_provider, count: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        listing = data_provider.list_tensors(
            tb_context.RequestContext(), experiment_id="", plugin_name=fmt.PLUGIN_NAME
        )
        if len(listing.get(RUN, {})) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"data server did not load {count} gradscope tags in {timeout}s")


def _ctx():
    return tb_context.RequestContext()


def test_every_table_kind_round_trips_exactly(data_provider):
    listing = data_provider.list_tensors(_ctx(), experiment_id="", plugin_name=fmt.PLUGIN_NAME)
    series = data_provider.read_tensors(
        _ctx(), experiment_id="", plugin_name=fmt.PLUGIN_NAME, downsample=1000
    )
    by_identity = {}
    for tag, meta in listing[RUN].items():
        info = fmt.parse_plugin_content(meta.plugin_content)
        by_identity[(info.kind, info.name)] = (info, series[RUN][tag])
    assert set(by_identity) == {(i.kind, i.name) for i in TABLE_RECORDS}
    for expected in TABLE_RECORDS:
        info, data = by_identity[(expected.kind, expected.name)]
        assert info == expected
        assert [d.step for d in data] == list(STEPS)
        for datum in data:
            table = fmt.decode_table(info, datum.numpy)
            np.testing.assert_array_equal(table.values, _table(info.kind, datum.step))


def test_flowgraph_and_events_round_trip_exactly(data_provider):
    listing = data_provider.list_blob_sequences(
        _ctx(), experiment_id="", plugin_name=fmt.PLUGIN_NAME
    )
    sequences = data_provider.read_blob_sequences(
        _ctx(), experiment_id="", plugin_name=fmt.PLUGIN_NAME, downsample=1000
    )
    seen = set()
    for tag, meta in listing[RUN].items():
        info = fmt.parse_plugin_content(meta.plugin_content)
        seen.add(info.kind)
        data = sequences[RUN][tag]
        assert [d.step for d in data] == list(STEPS)
        for datum in data:
            blobs = [data_provider.read_blob(_ctx(), blob_key=ref.blob_key) for ref in datum.values]
            documents = fmt.decode_blobs(info, blobs)
            if info.kind == fmt.Kind.FLOWGRAPH:
                assert [fmt.FlowGraph.from_json(d) for d in documents] == [_flowgraph()]
            else:
                events = [fmt.Event.from_json(d) for d in documents]
                expected = _events(datum.step)
                assert [e.message for e in events] == [e.message for e in expected]
                assert events[0].scope == HOSTILE
                assert np.isnan(events[0].evidence["l2"])
                assert events[0].evidence["ratio"] == float("inf")
                assert events[0].evidence["op"] == "NaN"
                assert events[1] == expected[1]
    assert seen == {fmt.Kind.FLOWGRAPH, fmt.Kind.EVENTS}


def test_every_summary_carries_its_data_class(logdir):
    for info in TABLE_RECORDS + [FLOWGRAPH, EVENTS]:
        metadata = fmt.create_summary_metadata(info)
        assert metadata.data_class == fmt.KIND_SPECS[info.kind].data_class
        assert metadata.plugin_data.plugin_name == "gradscope"
