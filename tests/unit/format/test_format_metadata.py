"""The format's metadata contract: versions, malformed content, tables, JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tb_gradscope import format as fmt


def _content(**overrides) -> bytes:
    payload = json.loads(fmt.make_info(fmt.Kind.GRAD_STATS, "td", ["a"]).to_content())
    payload.update(overrides)
    return json.dumps(payload).encode()


def test_metadata_round_trips_every_kind():
    for kind in fmt.Kind:
        info = fmt.make_info(kind, "name/with/slashes", ["a", "a/b"], {"tau": 0.01})
        parsed = fmt.parse_plugin_content(fmt.create_summary_metadata(info).plugin_data.content)
        assert parsed == info


def test_newer_version_is_reported_not_misread():
    with pytest.raises(fmt.NewerFormatError, match="newer tb-gradscope.*version 2"):
        fmt.parse_plugin_content(_content(version=fmt.FORMAT_VERSION + 1))


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe", "not UTF-8 JSON"),
        (b"[1, 2]", "not a JSON object"),
        (_content(version="1"), "no valid version"),
        (_content(version=True), "no valid version"),
        (_content(kind="histogram"), "unknown gradscope record kind"),
        (_content(scopes="a"), "malformed"),
        (_content(columns=["l2"]), "lacks columns"),
    ],
)
def test_malformed_metadata_raises_format_error(content, message):
    with pytest.raises(fmt.FormatError, match=message):
        fmt.parse_plugin_content(content)


def test_tags_are_unique_per_kind_name_and_layout():
    tags = {
        fmt.tag_for(fmt.Kind.GRAD_STATS, "td"),
        fmt.tag_for(fmt.Kind.GRAD_STATS, "td", layout=1),
        fmt.tag_for(fmt.Kind.GRAD_STATS, "aux"),
        fmt.tag_for(fmt.Kind.UPDATE_STATS),
    }
    assert len(tags) == 4
    assert fmt.tag_for(fmt.Kind.UPDATE_STATS) == "gradscope/update_stats"


def test_table_shape_is_checked_on_both_sides():
    info = fmt.make_info(fmt.Kind.GRAD_STATS, "td", ["a", "a/b"])
    with pytest.raises(fmt.FormatError, match=r"shape \(2, 4\), expected \(2, 5\)"):
        fmt.encode_table(info, np.zeros((2, 4)))
    with pytest.raises(fmt.FormatError, match="metadata says"):
        fmt.decode_table(info, np.zeros((3, 5), np.float32))
    with pytest.raises(fmt.FormatError, match="dtype"):
        fmt.decode_table(info, np.zeros((2, 5), np.int32))
    with pytest.raises(fmt.FormatError, match="blobs, not tables"):
        fmt.encode_table(fmt.make_info(fmt.Kind.EVENTS), [])


def test_table_rows_and_columns_are_labelled():
    info = fmt.make_info(fmt.Kind.UPDATE_STATS, "", ["a", "a/b"])
    table = fmt.decode_table(info, np.array([[1, 2], [3, 4]], np.float32))
    assert table.row("a/b") == {"update_norm": 3.0, "weight_norm": 4.0}
    np.testing.assert_array_equal(table.column("weight_norm"), [2.0, 4.0])
    assert "a" in table and "b" not in table


def test_json_blobs_keep_non_finite_floats_and_plain_strings_apart():
    document = {
        "nan": math.nan,
        "inf": math.inf,
        "ninf": -math.inf,
        "text": "NaN",
        "n": np.float32(1.5),
    }
    blob = fmt.encode_json(document)
    json.loads(blob)  # strict JSON: no bare NaN
    assert b"NaN," not in blob and b": NaN" not in blob
    decoded = fmt.decode_json(blob)
    assert math.isnan(decoded["nan"])
    assert decoded["inf"] == math.inf and decoded["ninf"] == -math.inf
    assert decoded["text"] == "NaN"
    assert decoded["n"] == 1.5


def test_flowgraph_rejects_unknown_flow_states():
    graph = fmt.FlowGraph(
        losses=[fmt.LossInfo("td")], scopes=["a"], cells={"td": {"a": "teleports"}}
    )
    with pytest.raises(fmt.FormatError, match="unknown flow states"):
        fmt.FlowGraph.from_json(graph.to_json())
    with pytest.raises(
        fmt.FormatError, match=r"FlowGraph document lacks field\(s\) \[.scopes., .cells.\]"
    ):
        fmt.FlowGraph.from_json({"losses": []})


def test_event_rejects_unknown_type():
    with pytest.raises(fmt.FormatError, match="unknown event type"):
        fmt.Event.from_json({"type": "rumour", "name": "x", "step": 1, "message": "m"})
