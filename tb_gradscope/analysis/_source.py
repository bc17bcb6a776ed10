"""The user's source line that created an op, from `op.traceback`.

TF records a Python traceback on every graph op (autograph frames already
mapped back to the user's file). The innermost frame outside TensorFlow,
Keras, tb_gradscope (its demos excepted) and site-packages is the line the
user wrote. Paths under the working directory are made relative so shared
logs do not leak home directories.
"""

from __future__ import annotations

from typing import Any

from tb_gradscope.core.source import is_library_frame, relative_path
from tb_gradscope.format.flowgraph import SourceLine


def user_source(op: Any, cwd: str | None = None) -> SourceLine | None:
    """The innermost user frame of `op.traceback`, or None if there is none."""
    try:
        frames = list(op.traceback)
    except Exception:  # noqa: BLE001 - graphs imported from GraphDefs have none
        return None
    for frame in reversed(frames):
        filename = frame.filename
        if is_library_frame(filename):
            continue
        return SourceLine(relative_path(filename, cwd), int(frame.lineno), str(frame.name))
    return None


__all__ = ["is_library_frame", "relative_path", "user_source"]
