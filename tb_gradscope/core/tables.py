"""The RecordInfo of each table a recorder writes: rows, columns and attrs, made once.

Every recorder labels its tables alike: a loss's GRAD_STATS and the step's
UPDATE_STATS over the recorder's scope layout, a pair's DRIFT over its target
scopes (with what the user declared, its state scopes and each row's online
scope), a pair of losses' CONFLICT over their shared scopes; `attrs` carry
`every_n_steps`, the recorder's name and the rule texts where a recorder
has them (docs/FORMAT.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from tb_gradscope.core import pairs as core_pairs
from tb_gradscope.core.pairs import Pair
from tb_gradscope.format import DRIFT_COLUMNS, Kind, RecordInfo, make_info
from tb_gradscope.scopes import ScopeLayout

CONFLICT_SEPARATOR = "|"


def drift_info(
    pair: Pair, layout: ScopeLayout, attrs: Mapping[str, Any] | None = None
) -> RecordInfo:
    """A pair's DRIFT record: its target scopes, every DRIFT column, and its attrs."""
    declared = {**pair.declared(), **(attrs or {})}
    declared["state_scopes"] = core_pairs.state_scopes(pair)
    declared["online_scopes"] = core_pairs.online_scopes(pair, layout)
    info = make_info(Kind.DRIFT, pair.name, layout.scopes, declared)
    return dataclasses.replace(info, columns=DRIFT_COLUMNS)


class TableInfos:
    """The RecordInfos of one recorder's tables, kept per name.

    Args:
      scopes: the rows of GRAD_STATS and UPDATE_STATS.
      attrs: every table's attrs (`every_n_steps`, `recorder`).
      rules: the rule texts, added to GRAD_STATS attrs when there are any.
    """

    def __init__(self, scopes: Sequence[str], attrs: Mapping[str, Any], rules: Sequence[str] = ()):
        self.scopes = tuple(scopes)
        self.attrs = dict(attrs)
        self.rules = list(rules)
        self._kept: dict[tuple[Kind, str, tuple[str, ...]], RecordInfo] = {}

    def grad_stats(self, loss: str) -> RecordInfo:
        extra = {"rules": self.rules} if self.rules else {}
        return self._info(Kind.GRAD_STATS, loss, self.scopes, extra)

    def update_stats(self) -> RecordInfo:
        return self._info(Kind.UPDATE_STATS, "", self.scopes)

    def conflict(self, a: str, b: str, scopes: Sequence[str]) -> RecordInfo:
        return self._info(
            Kind.CONFLICT, f"{a}{CONFLICT_SEPARATOR}{b}", tuple(scopes), {"losses": [a, b]}
        )

    def _info(
        self, kind: Kind, name: str, scopes: tuple[str, ...], extra: Mapping[str, Any] = {}
    ) -> RecordInfo:
        key = (kind, name, scopes)
        if key not in self._kept:
            self._kept[key] = make_info(kind, name, scopes, {**self.attrs, **extra})
        return self._kept[key]
