"""Encode and decode record payloads: tables (numpy) and JSON blobs.

Table kinds are float32 tensors of shape [len(scopes), len(columns)]; the
metadata content (see `metadata.RecordInfo`) labels rows and columns. Blob kinds
are rank-1 string tensors whose elements are UTF-8 JSON documents.

JSON blobs never contain bare NaN/Infinity (which strict JSON parsers reject):
a non-finite float is written as the object {"$float": "NaN"} (or "Infinity",
"-Infinity") and read back as a float. A plain string is never reinterpreted, so
a scope that happens to be named "NaN" stays a string.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from tb_gradscope.format.metadata import KIND_SPECS, FormatError, Kind, RecordInfo

_NONFINITE_TO_TEXT = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}
_TEXT_TO_NONFINITE = {v: float(k) for k, v in _NONFINITE_TO_TEXT.items()}
_FLOAT_KEY = "$float"


class Table:
    """One step of a table record: rows are scopes, columns are stats."""

    def __init__(self, info: RecordInfo, values: np.ndarray):
        self.info = info
        self.values = values
        self._row_of = {scope: i for i, scope in enumerate(info.scopes)}
        self._col_of = {col: j for j, col in enumerate(info.columns)}

    def column(self, name: str) -> np.ndarray:
        """All rows of one column, in scope order."""
        return self.values[:, self._col_of[name]]

    def row(self, scope: str) -> dict[str, float]:
        """One scope's stats as {column: value}."""
        i = self._row_of[scope]
        return {col: float(self.values[i, j]) for col, j in self._col_of.items()}

    def __contains__(self, scope: str) -> bool:
        return scope in self._row_of


def encode_table(info: RecordInfo, values: Any) -> np.ndarray:
    """Checks and converts a table to the float32 array that is written."""
    _require_table(info)
    array = np.asarray(values, dtype=np.float32)
    expected = (len(info.scopes), len(info.columns))
    if array.shape != expected:
        raise FormatError(
            f"{info.kind.value} '{info.name}': table has shape {array.shape}, "
            f"expected {expected} (scopes x columns)"
        )
    return array


def decode_table(info: RecordInfo, values: Any) -> Table:
    """Reads one step of a table record."""
    _require_table(info)
    array = np.asarray(values)
    expected = (len(info.scopes), len(info.columns))
    if array.shape != expected:
        raise FormatError(
            f"{info.kind.value} '{info.name}': stored table has shape "
            f"{array.shape}, metadata says {expected}"
        )
    if not np.issubdtype(array.dtype, np.floating):
        raise FormatError(f"{info.kind.value} '{info.name}': stored table has dtype {array.dtype}")
    return Table(info, array.astype(np.float64))


def encode_json(document: Any) -> bytes:
    """One JSON blob, with non-finite floats written as strings."""
    return json.dumps(
        _to_json_safe(document), sort_keys=True, ensure_ascii=False, allow_nan=False
    ).encode("utf-8")


def decode_json(blob: bytes) -> Any:
    """Reads a JSON blob written by `encode_json`.

    Raises:
      FormatError: the blob is not bytes (a damaged record can hold numbers),
        not UTF-8, or not JSON.
    """
    if not isinstance(blob, (bytes, bytearray, memoryview)):
        raise FormatError(f"gradscope blob is not a string but {type(blob).__name__}")
    try:
        return _from_json_safe(json.loads(bytes(blob).decode("utf-8")))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise FormatError(f"gradscope blob is not UTF-8 JSON: {e}") from None


def encode_blobs(info: RecordInfo, documents: Iterable[Any]) -> list[bytes]:
    """The string elements of a blob-sequence record."""
    _require_blobs(info)
    return [encode_json(d) for d in documents]


def decode_blobs(info: RecordInfo, blobs: Iterable[bytes]) -> list[Any]:
    """The documents of a blob-sequence record."""
    _require_blobs(info)
    return [decode_json(b) for b in blobs]


def float_or_none(value: float) -> float | None:
    """A JSON-friendly float for plain (non-blob) JSON: None for NaN/Inf."""
    return value if math.isfinite(value) else None


def _require_table(info: RecordInfo) -> None:
    if not KIND_SPECS[info.kind].is_table:
        raise FormatError(f"{info.kind.value} records are blobs, not tables")


def _require_blobs(info: RecordInfo) -> None:
    if KIND_SPECS[info.kind].is_table:
        raise FormatError(f"{info.kind.value} records are tables, not blobs")


def _to_json_safe(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return {_FLOAT_KEY: _NONFINITE_TO_TEXT[repr(value)]}
    if isinstance(value, (np.floating, np.integer, np.bool_)):
        return _to_json_safe(value.item())
    if isinstance(value, Mapping):
        return {str(k): _to_json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json_safe(v) for v in value]
    return value


def _from_json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        if len(value) == 1 and value.get(_FLOAT_KEY) in _TEXT_TO_NONFINITE:
            return _TEXT_TO_NONFINITE[value[_FLOAT_KEY]]
        return {k: _from_json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_from_json_safe(v) for v in value]
    return value


__all__ = [
    "Table",
    "Kind",
    "decode_blobs",
    "decode_json",
    "decode_table",
    "encode_blobs",
    "encode_json",
    "encode_table",
    "float_or_none",
]
