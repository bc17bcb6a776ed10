"""The user's source line: the innermost frame outside the libraries.

Frames of TensorFlow, Keras, PyTorch, tb_gradscope (its demos excepted) and
installed packages are the libraries'; the first other frame is the line the
user wrote. Paths under the working directory are made relative so shared
logs do not leak home directories. Used by both analyses (TF's
`op.traceback`, PyTorch's live frames).
"""

from __future__ import annotations

import os
import sys
from types import FrameType

import tb_gradscope
from tb_gradscope.format.flowgraph import SourceLine

_PACKAGE_DIR = os.path.dirname(os.path.abspath(tb_gradscope.__file__)) + os.sep
# The demos play the user's part: their lines are the ones to show.
_DEMOS_DIR = _PACKAGE_DIR + "demos" + os.sep
_LIBRARY_PARTS = (
    f"{os.sep}site-packages{os.sep}",
    f"{os.sep}dist-packages{os.sep}",
    f"{os.sep}tensorflow{os.sep}",
    f"{os.sep}keras{os.sep}",
    f"{os.sep}tf_keras{os.sep}",
)
# Frameworks whose frames are never the user's, wherever they are installed
# (an editable install is outside site-packages); found among the modules
# already imported, never imported here.
_FRAMEWORKS = ("torch", "tensorflow", "keras")


def is_library_frame(filename: str) -> bool:
    """True for frames the user did not write (TF, Keras, PyTorch, us, installed packages)."""
    if filename.startswith("<"):
        return True
    path = os.path.abspath(filename)
    if path.startswith(_DEMOS_DIR):
        return False
    if path.startswith(_PACKAGE_DIR) or any(part in path for part in _LIBRARY_PARTS):
        return True
    return any(path.startswith(d) for d in _framework_dirs())


def _framework_dirs() -> list[str]:
    dirs = []
    for name in _FRAMEWORKS:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if where:
            dirs.append(os.path.dirname(os.path.abspath(where)) + os.sep)
    return dirs


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


def caller_source(depth: int = 1, cwd: str | None = None) -> SourceLine | None:
    """The innermost user frame of the live stack, `depth` frames above this call."""
    frame: FrameType | None = sys._getframe(depth)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not is_library_frame(filename):
            return SourceLine(relative_path(filename, cwd), frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return None
