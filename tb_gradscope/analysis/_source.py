"""The user's source line that created an op, from `op.traceback`.

TF records a Python traceback on every graph op (autograph frames already
mapped back to the user's file). The innermost frame outside TensorFlow,
Keras, tb_gradscope (its demos excepted) and site-packages is the line the
user wrote. Paths under the working directory are made relative so shared
logs do not leak home directories.
"""

from __future__ import annotations

import os
from typing import Any

from tb_gradscope.format.flowgraph import SourceLine

# tb_gradscope's own folder, found from this file's place in it (importing the
# root package here would close a circle: the root lazily imports `record`).
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# The demos play the user's part: their lines are the ones to show.
_DEMOS_DIR = _PACKAGE_DIR + "demos" + os.sep
_LIBRARY_PARTS = (
    f"{os.sep}site-packages{os.sep}",
    f"{os.sep}dist-packages{os.sep}",
    f"{os.sep}tensorflow{os.sep}",
    f"{os.sep}keras{os.sep}",
    f"{os.sep}tf_keras{os.sep}",
)


def is_library_frame(filename: str) -> bool:
    """True for frames the user did not write (TF, Keras, us, installed packages)."""
    if filename.startswith("<"):
        return True
    path = os.path.abspath(filename)
    if path.startswith(_DEMOS_DIR):
        return False
    return path.startswith(_PACKAGE_DIR) or any(part in path for part in _LIBRARY_PARTS)


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


def relative_path(filename: str, cwd: str | None = None) -> str:
    """`filename` relative to `cwd` (default: the working directory) when under
    it; our demos' files as `tb_gradscope/demos/...` wherever they are installed."""
    base = os.path.abspath(cwd or os.getcwd())
    path = os.path.abspath(filename)
    if path == base or path.startswith(base.rstrip(os.sep) + os.sep):
        return os.path.relpath(path, base)
    if path.startswith(_DEMOS_DIR):
        return os.path.relpath(path, os.path.dirname(_PACKAGE_DIR.rstrip(os.sep)))
    return path
