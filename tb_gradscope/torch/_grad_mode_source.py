"""The user's line that turned gradients off: a `with torch.no_grad():` block or a `@torch.no_grad()` function.

An op run with gradients off is cut where the user switched them off, not
where the op happens to be written: in `with torch.no_grad(): y = critic_t(s2)`
the op runs inside `Critic.forward`, but the line that blocks the path is the
`with` line. The live user frames are searched from the innermost outward for
a grad-off region (`no_grad()`, `inference_mode()`, `set_grad_enabled(False)`,
as a `with` item or a decorator) enclosing the frame's current line; each
file is parsed once. Where none is found (gradients switched off by a call,
or inside a library), the caller falls back to the op's own line.
"""

from __future__ import annotations

import ast
import bisect
import dataclasses
import functools
import linecache
import sys
from types import FrameType

from tb_gradscope.core.source import is_library_frame, relative_path
from tb_gradscope.format.flowgraph import SourceLine


@dataclasses.dataclass(frozen=True)
class _Region:
    first: int  # the region's first and last lines: a with-block or a decorated function
    last: int
    line: int  # the line that switched gradients off: the `with` or the decorator


def grad_off_source() -> SourceLine | None:
    """The `with torch.no_grad():` (or decorator) enclosing the innermost user
    frame that is inside one, from the live stack; None if no user frame is."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        if not is_library_frame(filename):
            region = _innermost(_regions(filename), frame.f_lineno)
            if region is not None:
                return SourceLine(relative_path(filename), region.line, frame.f_code.co_name)
        frame = frame.f_back
    return None


def _innermost(regions: tuple[_Region, ...], line: int) -> _Region | None:
    """The region with the latest first line among those holding `line` (regions sorted by first)."""
    end = bisect.bisect_right([r.first for r in regions], line)
    for region in reversed(regions[:end]):
        if region.first <= line <= region.last:
            return region
    return None


@functools.lru_cache(maxsize=256)
def _regions(filename: str) -> tuple[_Region, ...]:
    """Every grad-off region of a file, sorted by first line; none if it does not parse."""
    try:
        tree = ast.parse("".join(linecache.getlines(filename)))
    except (SyntaxError, ValueError):
        return ()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.With, ast.AsyncWith)):
            if any(_turns_grad_off(item.context_expr) for item in node.items):
                found.append(_Region(node.lineno, node.end_lineno or node.lineno, node.lineno))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in node.decorator_list:
                if _turns_grad_off(decorator):
                    last = node.end_lineno or node.lineno
                    found.append(_Region(node.lineno, last, decorator.lineno))
    return tuple(sorted(found, key=lambda r: r.first))


def _turns_grad_off(expr: ast.expr) -> bool:
    """`no_grad()`, `inference_mode()` (not `inference_mode(False)`),
    `set_grad_enabled(False)`, however torch is imported."""
    if not isinstance(expr, ast.Call):
        return False
    func = expr.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    first = expr.args[0] if expr.args else next((k.value for k in expr.keywords), None)
    off = isinstance(first, ast.Constant) and first.value is False
    if name == "no_grad":
        return True
    if name == "inference_mode":
        return not off
    if name == "set_grad_enabled":
        return off
    return False
