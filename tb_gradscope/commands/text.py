"""Printing untrusted names safely, numbers compactly and evidence as phrases.

Loss, scope, op and file names come from log files anyone can write. Printed
raw, an escape sequence in a scope name could rewrite the user's terminal, so
every C0/C1 control character, DEL and the bidirectional overrides are shown
as `\\xNN` / `\\uNNNN` escapes instead. The wording lives on the read side
(`tb_gradscope.read.evidence`), so the tab says what `check`, `doctor` and
`report` print.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tb_gradscope.read.evidence import evidence_sentences, number, safe

__all__ = ["evidence", "number", "safe"]


def evidence(doc: Mapping[str, Any]) -> str:
    """`cause missing_stop_gradient; no cut on target/q -> loss:td; ‖g‖ 3.244` from an evidence document."""
    return "; ".join(evidence_sentences(doc))
