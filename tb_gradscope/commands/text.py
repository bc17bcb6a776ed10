"""Printing untrusted names safely and numbers compactly.

Loss, scope, op and file names come from log files anyone can write. Printed
raw, an escape sequence in a scope name could rewrite the user's terminal, so
every C0/C1 control character, DEL and the bidirectional overrides are shown
as `\\xNN` / `\\uNNNN` escapes instead.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

_BIDI = {0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A)}


def safe(text: Any) -> str:
    """`text` as a string with control characters escaped."""
    out = []
    for ch in str(text):
        code = ord(ch)
        if code < 0x20 or 0x7F <= code <= 0x9F:
            out.append(f"\\x{code:02x}")
        elif code in _BIDI:
            out.append(f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def number(value: Any) -> str:
    """A float in 4 significant digits; NaN/Inf spelled out; ints as ints; None as -."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return f"{value:.4g}"
    return safe(value)


def evidence(doc: Mapping[str, Any]) -> str:
    """`l2=0.05 grad_vars=2 path=a -> loss:b` from an event's evidence."""
    parts = []
    for key in sorted(doc):
        if key == "at" or (key == "path" and doc.get("path") == doc.get("missing_cut")):
            continue
        value = doc[key]
        if isinstance(value, (list, tuple)):
            shown = " -> ".join(safe(v) for v in value) if key in ("path", "missing_cut") else ", ".join(
                safe(v) for v in value
            )
        elif isinstance(value, Mapping):
            shown = "{" + ", ".join(f"{safe(k)}: {number(v)}" for k, v in value.items()) + "}"
        else:
            shown = number(value)
        parts.append(f"{safe(key)}={shown}")
    return " ".join(parts)
