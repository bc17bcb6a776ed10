"""Type checks of every JSON field of the format (docs/FORMAT.md).

A log is untrusted input: a record damaged on disk, written by a buggy tool or
by hand must be skipped with a reason, never crash a reader further down (a
step that is a string breaks sorting, a loss that is a list breaks a dict).
Readers call these on each document and on each record's metadata `attrs`;
the messages name the field and what it holds instead.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from tb_gradscope.format.metadata import FormatError, Kind, RecordInfo, parse_plugin_content

Check = Callable[[Any], bool]


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    """An int or a float (NaN/Inf allowed: blobs encode them), never a bool."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_positive_number(value: Any) -> bool:
    return is_number(value) and math.isfinite(value) and value > 0


def is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


def is_object(value: Any) -> bool:
    """A JSON object (string keys)."""
    return isinstance(value, dict) and all(isinstance(k, str) for k in value)


def optional(check: Check) -> Check:
    return lambda value: value is None or check(value)


def describe(value: Any) -> str:
    """A short account of a wrong value: its JSON type and a clipped repr."""
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }
    text = repr(value)
    text = text if len(text) <= 40 else text[:37] + "..."
    return f"{names.get(type(value), type(value).__name__)} ({text})"


def require(
    doc: Any, what: str, fields: Mapping[str, tuple[Check, str]], required: tuple[str, ...] = ()
) -> None:
    """Checks a JSON object's fields: `fields[name] = (check, expected)`.

    Unknown fields are allowed (newer writers may add optional ones).

    Raises:
      FormatError: `doc` is not an object, a required field is missing, or a
        field does not pass its check; the message names the field.
    """
    if not is_object(doc):
        raise FormatError(f"{what} is {describe(doc)}, not a JSON object")
    missing = [name for name in required if name not in doc]
    if missing:
        raise FormatError(f"{what} lacks field(s) {missing}")
    for name, (check, expected) in fields.items():
        if name in doc and not check(doc[name]):
            raise FormatError(
                f"{what} field '{name}' is {describe(doc[name])}, expected {expected}"
            )


# Metadata `attrs` per kind: {name: (check, expected)}. An attribute that
# fails its check is dropped (with a warning): the record's data stay readable.
_COMMON_ATTRS = {
    "every_n_steps": (is_int, "an integer"),
    "recorder": (is_str, "a string"),
}
ATTR_SCHEMA: Mapping[Kind, Mapping[str, tuple[Check, str]]] = {
    Kind.GRAD_STATS: {
        **_COMMON_ATTRS,
        "kind": (is_str, "a string"),
        "rules": (is_str_list, "a list of rule strings"),
    },
    Kind.UPDATE_STATS: _COMMON_ATTRS,
    Kind.DRIFT: {
        **_COMMON_ATTRS,
        "target": (is_str, "a string"),
        "online": (is_str, "a string"),
        "tau": (optional(is_positive_number), "a number > 0"),
        "every": (optional(lambda v: is_int(v) and v > 0), "a positive integer"),
        "state_scopes": (is_str_list, "a list of scope names"),
        "online_scopes": (is_str_list, "a list of scope names"),
    },
    Kind.CONFLICT: {
        **_COMMON_ATTRS,
        "losses": (lambda v: is_str_list(v) and len(v) == 2, "a list of two loss names"),
    },
    Kind.FLOWGRAPH: {**_COMMON_ATTRS, "rules": (is_str_list, "a list of rule strings")},
    Kind.EVENTS: _COMMON_ATTRS,
}


def clean_attrs(kind: Kind, attrs: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(attrs without the ones that fail their check, a problem per dropped one)."""
    schema = ATTR_SCHEMA.get(kind, {})
    kept, problems = {}, []
    for name, value in attrs.items():
        check = schema.get(name)
        if check is not None and not check[0](value):
            problems.append(f"attrs '{name}' is {describe(value)}, expected {check[1]}: ignored")
        else:
            kept[name] = value
    return kept, problems


def read_plugin_content(content: bytes) -> tuple[RecordInfo, list[str]]:
    """(the record's metadata with its malformed attrs dropped, a problem per
    dropped attr). Raises what `parse_plugin_content` raises."""
    info = parse_plugin_content(content)
    attrs, problems = clean_attrs(info.kind, info.attrs)
    if problems:
        info = dataclasses.replace(info, attrs=attrs)
    return info, problems
