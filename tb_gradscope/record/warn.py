"""Warnings from the recorder: each said once, then the recorder steps aside.

Failures of recording (a writer gone, analysis failing, an unexpected error in
the stats) must never stop a training loop, so they become a GradscopeWarning,
emitted once per key (a recorder and a problem) so a loop of a million steps
does not print a million lines.
"""

from __future__ import annotations

import logging
import warnings
from typing import Hashable

logger = logging.getLogger("tb_gradscope.record")

_said: set[Hashable] = set()


class GradscopeWarning(UserWarning):
    """Something tb_gradscope could not record; training is unaffected."""


def warn_once(key: Hashable, message: str) -> bool:
    """Warns with `message` unless `key` was warned about before. True if warned."""
    if key in _said:
        return False
    _said.add(key)
    logger.warning(message)
    warnings.warn(message, GradscopeWarning, stacklevel=3)
    return True
