"""JSON-safe numbers for the HTTP API.

Finite numbers stay JSON numbers; NaN, +Inf and -Inf become the strings
"NaN", "Infinity" and "-Infinity" (what TensorBoard's own routes send, and what
strict JSON parsers accept); a missing value is null. Route data is built with
these helpers, so JSON and CSV come out of the same values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

NAN, INF, NEG_INF = "NaN", "Infinity", "-Infinity"


def num(value: float | None) -> float | str | None:
    """One number, JSON-safe."""
    if value is None:
        return None
    value = float(value)
    if math.isfinite(value):
        return value
    if math.isnan(value):
        return NAN
    return INF if value > 0 else NEG_INF


def nums(values: np.ndarray) -> list:
    """A 1-D array as a JSON-safe list (fast when all values are finite)."""
    array = np.asarray(values, dtype=np.float64)
    if np.isfinite(array).all():
        return array.tolist()
    return [num(v) for v in array.tolist()]


def jsonable(value: Any) -> Any:
    """A document (dicts, lists, numbers, strings) made JSON-safe throughout."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return num(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return str(value)


def dumps(data: Any) -> str:
    """Serialises route data already made JSON-safe (fails loudly if not)."""
    return json.dumps(data, allow_nan=False, ensure_ascii=False, separators=(",", ":"))
