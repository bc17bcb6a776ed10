"""JSON-safe numbers and spreadsheet-safe CSV text for the HTTP API."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tb_gradscope.plugin import encoding, export

DECODE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def decode(value):
    return DECODE.get(value, value) if isinstance(value, str) else value


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_every_float_survives_strict_json(value):
    text = encoding.dumps({"v": encoding.num(value)})
    back = decode(json.loads(text)["v"])
    assert (math.isnan(back) and math.isnan(value)) or back == value


@given(st.lists(st.floats(width=32, allow_nan=True, allow_infinity=True), max_size=50))
def test_arrays_match_one_by_one_encoding(values):
    array = np.asarray(values, dtype=np.float32)
    assert encoding.nums(array) == [encoding.num(float(v)) for v in array]


def test_documents_are_made_safe_throughout():
    doc = {
        "a": [1, np.float32(2.5), float("nan")],
        "b": {"c": np.int64(3), "d": float("-inf")},
        "e": None,
    }
    assert encoding.jsonable(doc) == {
        "a": [1, 2.5, "NaN"],
        "b": {"c": 3, "d": "-Infinity"},
        "e": None,
    }
    assert encoding.num(None) is None


@given(st.text())
def test_csv_text_never_starts_a_formula(name):
    safe = export.text(name)
    assert not safe.startswith(("=", "+", "-", "@", "\t", "\r"))
    assert safe in (name, "'" + name)
