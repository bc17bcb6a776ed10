"""Warnings from the recorder: each said once, then the recorder steps aside.

Failures of recording (a writer gone, analysis failing, an unexpected error in
the stats) must never stop a training loop, so they become a GradscopeWarning,
emitted once per key (a recorder and a problem) so a loop of a million steps
does not print a million lines. It also goes to the `tb_gradscope.record`
logger when the user's logging has a handler for it (without one, logging's
last resort would print it a second time).
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from collections.abc import Hashable

logger = logging.getLogger("tb_gradscope.record")

_said: set[Hashable] = set()


class GradscopeWarning(UserWarning):
    """Something tb_gradscope could not record; training is unaffected."""


def warn_once(key: Hashable, message: str) -> bool:
    """Warns with `message` unless `key` was warned about before. True if warned."""
    if key in _said:
        return False
    _said.add(key)
    if logger.hasHandlers():  # else logging's last resort would print it a second time
        logger.warning(message)
    warnings.warn(message, GradscopeWarning, stacklevel=_user_stacklevel())
    return True


def _user_stacklevel() -> int:
    """The stacklevel of the first caller outside tb_gradscope and tensorflow."""
    inside = (os.sep + "tb_gradscope" + os.sep, os.sep + "tensorflow" + os.sep)
    frame, level = sys._getframe(1), 1
    while frame is not None and any(p in frame.f_code.co_filename for p in inside):
        frame, level = frame.f_back, level + 1
    return level
