"""A backward's call site: the user's frame that started it, and the loss name its source line gives.

Watch mode (`rec.watch()`) and the SB3 and Lightning callbacks see
`torch.autograd.backward` called with no name; the name comes from the source
of the call that started it, in the innermost frame outside torch, Lightning
and tb_gradscope (Stable-Baselines3's own files are call sites: its
`critic_loss.backward()` names "critic_loss"):

    critic_loss.backward()                    -> "critic_loss"
    self.loss.backward()                      -> "loss"
    scaler.scale(loss).backward()             -> "loss"
    loss.mean().backward()                    -> "loss"
    losses["critic"].backward()               -> "critic"
    self.manual_backward(g_loss)              -> "g_loss"
    torch.autograd.backward(loss, ...)        -> "loss"
    fabric.backward(loss) / accelerator.backward(loss) -> "loss"
    torch.autograd.backward([a, b])           -> "a+b" (`loss_names`: "a", "b")

anything else -> "<file basename>:<line>". The call is found by the position of
the frame's current instruction in the whole file's syntax tree, so a call
split over lines (`(loss\\n .backward())`) is named too (before Python 3.11,
which has no column positions, by its line: two backward calls on one line
then fall back to "<file basename>:<line>"). A name never holds
"/" or "|" (the loss-name rule). Parsed files and each call site's names are
cached: a watched backward pays a dict lookup.
"""

from __future__ import annotations

import ast
import linecache
import os
import sys
from types import CodeType, FrameType

# Top-level packages whose frames are not call sites: the backward's plumbing.
SKIPPED_PACKAGES = frozenset(
    {
        "torch",
        "lightning",
        "pytorch_lightning",
        "lightning_fabric",
        "lightning_utilities",
        "tb_gradscope",
    }
)
# `X.backward(loss)` where X is one of these: X is a backward runner, the loss is the argument.
_RUNNERS = frozenset({"autograd", "fabric", "accelerator"})
_CACHE_SIZE = 4096

# (code object, instruction offset) -> the loss names of the call there.
_names: dict[tuple[CodeType, int], tuple[str, ...]] = {}
# A file's backward calls' names: by (end line, end column) and by each line they span.
_FileCalls = tuple[dict[tuple[int, int], tuple[str, ...]], dict[int, set[tuple[str, ...]]]]
# file name -> (its lines, its backward calls).
_files: dict[str, tuple[list[str], _FileCalls]] = {}


def user_frame(frame: FrameType | None = None) -> FrameType | None:
    """The innermost frame, from `frame` (default: the caller's) outwards,
    whose module is outside `SKIPPED_PACKAGES`; None if there is none."""
    frame = sys._getframe(1) if frame is None else frame
    while frame is not None:
        module = frame.f_globals.get("__name__") or ""
        if module.partition(".")[0] not in SKIPPED_PACKAGES:
            return frame
        frame = frame.f_back
    return None


def loss_name(frame: FrameType) -> str:
    """The loss name the call running in `frame` gives (module docstring);
    a list of losses gives their names joined by "+"."""
    return "+".join(loss_names(frame))


def loss_names(frame: FrameType, count: int = 1) -> tuple[str, ...]:
    """One name per loss of the backward call running in `frame`: a literal
    list `[a, b]` names each element; otherwise `count` names from one
    ("x" for one loss, "x[0]", "x[1]"... for several)."""
    key = (frame.f_code, frame.f_lasti)
    names = _names.get(key)
    if names is None:
        names = _site_names(frame)
        if len(_names) >= _CACHE_SIZE:
            _names.clear()
        _names[key] = names
    if len(names) == count:
        return names
    base = "+".join(names)
    return (base,) if count == 1 else tuple(f"{base}[{k}]" for k in range(count))


def _site_names(frame: FrameType) -> tuple[str, ...]:
    code = frame.f_code
    fallback = (_safe(f"{os.path.basename(code.co_filename)}:{frame.f_lineno}"),)
    by_end, by_line = _calls_of(code.co_filename, frame.f_globals)
    position = _position(code, frame.f_lasti)
    if position is not None and position in by_end:
        return by_end[position]
    # No column positions (Python 3.10): the one backward call on the line, if one.
    on_line = by_line.get(frame.f_lineno, set())
    return next(iter(on_line)) if len(on_line) == 1 else fallback


def _position(code: CodeType, lasti: int) -> tuple[int, int] | None:
    """(end line, end column) of the instruction at byte offset `lasti`;
    None before Python 3.11 (no `co_positions`)."""
    positions = getattr(code, "co_positions", None)
    if positions is None or lasti < 0:
        return None
    for k, (_, end_line, _, end_col) in enumerate(positions()):
        if k == lasti // 2:
            return None if end_line is None or end_col is None else (end_line, end_col)
    return None


def _calls_of(filename: str, module_globals: dict) -> _FileCalls:
    """The file's backward calls: by (end line, end column), and per line they span."""
    lines = linecache.getlines(filename, module_globals)
    cached = _files.get(filename)
    if cached is not None and cached[0] is lines:
        return cached[1]
    by_end: dict[tuple[int, int], tuple[str, ...]] = {}
    by_line: dict[int, set[tuple[str, ...]]] = {}
    try:
        tree = ast.parse("".join(lines))
    except (SyntaxError, ValueError):
        tree = None
    if tree is not None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and node.end_lineno is not None:
                names = _call_names(node)
                if names:
                    # Both ast's and co_positions' columns are UTF-8 byte offsets.
                    by_end[(node.end_lineno, node.end_col_offset)] = names
                    for line in range(node.lineno, node.end_lineno + 1):
                        by_line.setdefault(line, set()).add(names)
    if len(_files) >= 64:
        _files.clear()
    _files[filename] = (lines, (by_end, by_line))
    return by_end, by_line


def _call_names(call: ast.Call) -> tuple[str, ...]:
    """The loss names of a backward call; () if `call` is not one."""
    func = call.func
    if isinstance(func, ast.Attribute) and func.attr == "backward":
        receiver = _name(func.value)
        if receiver in _RUNNERS:
            return _argument_names(call)
        return (receiver,) if receiver else ()
    if (isinstance(func, ast.Attribute) and func.attr == "manual_backward") or (
        isinstance(func, ast.Name) and func.id in ("backward", "manual_backward")
    ):
        return _argument_names(call)
    return ()


def _argument_names(call: ast.Call) -> tuple[str, ...]:
    if call.args:
        first = call.args[0]
    else:
        first = next((k.value for k in call.keywords if k.arg in ("tensors", "loss")), None)
    if first is None:
        return ()
    if isinstance(first, (ast.List, ast.Tuple)):
        names = tuple(_name(e) for e in first.elts)
        return names if names and all(names) else ()
    name = _name(first)
    return (name,) if name else ()


def _name(node: ast.expr) -> str:
    """A loss expression's name: a variable, an attribute's last part,
    `scaler.scale(x)` / `x.mean()` -> x's, `d["key"]` -> "key"; "" if none."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        key = node.slice
        if isinstance(key, ast.Constant) and isinstance(key.value, str) and key.value:
            return _safe(key.value)
        return _name(node.value)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "scale" and node.args:
            return _name(node.args[0])
        if not node.args and not node.keywords:
            return _name(node.func.value)
    return ""


def _safe(name: str) -> str:
    return name.replace("/", "_").replace("|", "_")
