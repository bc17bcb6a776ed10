"""Private TensorFlow/Keras API lives in `tb_gradscope/_tf_private.py` only (as
tests/unit/test_layering.py holds the import arrows): an AST walk of every other
module of the package, importing nothing.

The rule, outside `_tf_private.py`:
- no import from `tensorflow.<anything>` but `tensorflow.compat` (`tensorflow.python`,
  `tensorflow.core`, ...), `keras.src` or `tf_keras.src`, at the top or in a function,
  nor of a `_name` from tensorflow, keras or tf_keras, nor such a module by
  `importlib.import_module`, nor as an attribute (`tf.python`);
- no private attribute (`x._name`, `getattr(x, "_name")`, also hasattr/setattr/delattr)
  read or written on anything but `self` / `cls`, save the exceptions below;
- no `__code__` or `__internal__` (the tricks on TF's tracing and its internal namespace);
- from `_tf_private`, only the names of its `__all__`.
A static walk cannot know a receiver's type, so the rule is on the attribute:
every private attribute of an object not `self` is foreign unless listed here.
An attribute name built at run time (`getattr(x, name)`) is out of its reach.
"""

from __future__ import annotations

import ast
from pathlib import Path

import tb_gradscope

PACKAGE_DIR = Path(tb_gradscope.__file__).parent
PRIVATE_MODULE = PACKAGE_DIR / "_tf_private.py"
# PyTorch's private symbols live in the torch recorder's own module (tested by
# tests/unit/torch/test_torch_private.py), as TF's live in _tf_private.py.
TORCH_PRIVATE_MODULE = PACKAGE_DIR / "torch" / "_torch_private.py"

# The package's own private attributes read across its own objects, each with its reader.
PACKAGE_OWN = {
    "_s": "the Recorder's state, read by its StepFunction (record/step_function.py)",
    "_before": "GraphRecorder's run hooks, called by RecordingSession (integrations/tf1/session.py)",
    "_after": "GraphRecorder's run hooks, called by RecordingSession (integrations/tf1/session.py)",
    "_owns": "GraphRecorder's run hooks, called by RecordingSession (integrations/tf1/session.py)",
    "_recover": "GraphRecorder's run hooks, called by RecordingSession (integrations/tf1/session.py)",
}
# The package's own marks on others' objects (`writer._gradscope_token`, `_gradscope_capture`).
OWN_PREFIX = "_gradscope"
# Public API spelled with an underscore (namedtuple's, documented so to avoid clashing with field names).
NAMEDTUPLE_API = {"_fields", "_replace", "_asdict", "_make"}
# Python's own, documented: the caller's frame for warnings' stacklevel (record/warn.py).
PYTHON_PRIVATE = {("sys", "_getframe")}

FORBIDDEN_DUNDERS = {"__code__", "__internal__"}
FRAMEWORKS = ("tensorflow", "keras", "tf_keras", "torch")


def _forbidden_module(module: str) -> bool:
    """A module of TF/Keras that is not public API: of tensorflow only `tensorflow`,
    `tensorflow.compat...` and `tensorflow.keras...` are (`tensorflow.python`, `tensorflow.core`,
    ... are not); of keras / tf_keras anything but `src` and private names."""
    parts = module.split(".")
    if parts[0] == "tensorflow" and len(parts) > 1 and parts[1] not in ("compat", "keras"):
        return True
    return _forbidden_name(module)


def _forbidden_name(name: str) -> bool:
    """A TF/Keras name reached through a module (`tf.python.ops`, `keras.src`, `tf.__internal__`,
    `tf.summary._x`) that is not public API; `tf.constant` is."""
    parts = name.split(".")
    if parts[0] not in FRAMEWORKS:
        return False
    if any(_private(part) or part == "__internal__" for part in parts[1:]):
        return True
    second = parts[1] if len(parts) > 1 else ""
    return (
        second in ("python", "core", "tsl", "compiler")
        if parts[0] == "tensorflow"
        else second == "src"
    )


def _dotted(node: ast.AST) -> str | None:
    """`tf.python.ops` for the attribute chain of names, else None."""
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(names)])


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def offenders(
    source: str, filename: str = "<module>", allowed: set[str] | None = None
) -> list[str]:
    """Every use of private TF/Keras API in `source`, as `file:line what`.
    `allowed`: the names `_tf_private` exports (None: every name is refused)."""
    tree = ast.parse(source, filename=filename)
    allowed = allowed or set()
    aliases, private_aliases = _aliases(tree)
    found: list[str] = []

    def bad(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{node.lineno} {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _forbidden_module(alias.name):
                    bad(node, f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "tb_gradscope" and any(a.name == "_tf_private" for a in node.names):
                continue
            if node.module == "tb_gradscope._tf_private":
                for alias in node.names:
                    if alias.name not in allowed:
                        bad(
                            node,
                            f"from tb_gradscope._tf_private import {alias.name} (not in its __all__)",
                        )
                continue
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _forbidden_module(node.module) or _forbidden_name(full):
                    bad(node, f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            first = node.args[0] if node.args else None
            if (
                name in ("import_module", "__import__")
                and isinstance(first, ast.Constant)
                and isinstance(first.value, str)
            ):
                if _forbidden_module(first.value):
                    bad(node, f"{name}({first.value!r})")
            if name in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) > 1:
                attr = node.args[1]
                if isinstance(attr, ast.Constant) and isinstance(attr.value, str):
                    _check_attr(node, node.args[0], attr.value, bad)
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node)
            if dotted is not None:
                head, _, rest = dotted.partition(".")
                if head in private_aliases:
                    if dotted.count(".") == 1 and node.attr not in allowed:
                        bad(node, f"{dotted} (not in _tf_private.__all__)")
                    continue
                if head in aliases and rest and _forbidden_name(f"{aliases[head]}.{rest}"):
                    parent = f"{aliases[head]}.{rest.rpartition('.')[0]}".rstrip(".")
                    if not _forbidden_name(parent):  # the chain once, where it turns private
                        bad(node, dotted)
                    continue
            _check_attr(node, node.value, node.attr, bad)
    return sorted(set(found), key=lambda s: (int(s.split(":")[1].split()[0]), s))


def _aliases(tree: ast.AST) -> tuple[dict[str, str], set[str]]:
    """The names a module binds to TF/Keras modules (`tf` -> `tensorflow`), anywhere in it,
    and those it binds to `_tf_private`."""
    aliases = {name: name for name in FRAMEWORKS}
    private_aliases: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in FRAMEWORKS:
                    aliases[alias.asname or top] = alias.name if alias.asname else top
                if alias.name == "tb_gradscope._tf_private" and alias.asname:
                    private_aliases.add(alias.asname)
        elif isinstance(node, ast.ImportFrom) and node.module == "tb_gradscope" and node.level == 0:
            private_aliases.update(
                a.asname or a.name for a in node.names if a.name == "_tf_private"
            )
    return aliases, private_aliases


def _check_attr(node: ast.AST, owner: ast.AST, attr: str, bad) -> None:
    if attr in FORBIDDEN_DUNDERS:
        bad(node, attr)
        return
    if not _private(attr):
        return
    if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
        return
    if attr.startswith(OWN_PREFIX) or attr in PACKAGE_OWN or attr in NAMEDTUPLE_API:
        return
    if isinstance(owner, ast.Name) and (owner.id, attr) in PYTHON_PRIVATE:
        return
    bad(node, f"private attribute {attr}")


def _exported() -> set[str]:
    """`_tf_private.__all__`, read from its source."""
    for node in ast.parse(PRIVATE_MODULE.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", None) == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    raise AssertionError("_tf_private.py has no __all__")


def _modules() -> list[Path]:
    return sorted(
        p for p in PACKAGE_DIR.rglob("*.py") if p not in (PRIVATE_MODULE, TORCH_PRIVATE_MODULE)
    )


def _importers() -> set[str]:
    """Top-level packages (or modules) of tb_gradscope that import `_tf_private`."""
    found = set()
    for path in _modules():
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            hit = (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (
                    node.module == "tb_gradscope._tf_private"
                    or (
                        node.module == "tb_gradscope"
                        and any(a.name == "_tf_private" for a in node.names)
                    )
                )
            ) or (
                isinstance(node, ast.Import)
                and any(a.name == "tb_gradscope._tf_private" for a in node.names)
            )
            if hit:
                found.add(path.relative_to(PACKAGE_DIR).parts[0].removesuffix(".py"))
    return found


def test_the_rule_finds_planted_private_uses():
    planted = """
import tensorflow as tf
import tensorflow.python.ops.gen_summary_ops
import keras.src.backend as kb
from tensorflow.python.ops import summary_ops_v2
from tensorflow.core.framework import attr_value_pb2
from tensorflow import python
from keras.src import backend
from tf_keras.src.engine import training
from keras import _tf_keras
from tb_gradscope._tf_private import summary_ops_v2 as sneaked
from tb_gradscope import _tf_private as private
import importlib

def f(op, tape, model, writer, fn):
    op._set_attr("x", 1)
    getattr(tape, "_persistent", True)
    hasattr(model, "_compile_loss")
    setattr(writer, "_resource", None)
    fn.__code__ = fn.__code__.replace(co_name="x")
    tf.__internal__.x
    tf.python.ops
    importlib.import_module("keras.src.backend")
    private.mirrored_run
    self._writer._resource
"""
    found = [line.split(" ", 1)[1] for line in offenders(planted, allowed={"tape_is_persistent"})]
    assert found == [
        "import tensorflow.python.ops.gen_summary_ops",
        "import keras.src.backend",
        "from tensorflow.python.ops import summary_ops_v2",
        "from tensorflow.core.framework import attr_value_pb2",
        "from tensorflow import python",
        "from keras.src import backend",
        "from tf_keras.src.engine import training",
        "from keras import _tf_keras",
        "from tb_gradscope._tf_private import summary_ops_v2 (not in its __all__)",
        "private attribute _set_attr",
        "private attribute _persistent",
        "private attribute _compile_loss",
        "private attribute _resource",
        "__code__",
        "tf.__internal__",
        "tf.python",
        "import_module('keras.src.backend')",
        "private.mirrored_run (not in _tf_private.__all__)",
        "private attribute _resource",
    ], found


def test_the_rule_finds_planted_private_torch_uses():
    planted = """
import torch
import torch._dynamo
from torch._C import _functions
from torch.overrides import _get_current_function_mode_stack

def f(x):
    torch._foreach_norm([x], 2)
    torch.overrides._pop_mode()
    x._version
"""
    found = [line.split(" ", 1)[1] for line in offenders(planted)]
    assert found == [
        "import torch._dynamo",
        "from torch._C import _functions",
        "from torch.overrides import _get_current_function_mode_stack",
        "torch._foreach_norm",
        "torch.overrides._pop_mode",
        "private attribute _version",
    ], found


def test_the_rule_lets_public_torch_api_pass():
    clean = """
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode, resolve_name
from tb_gradscope.torch import _torch_private as private

def f(x, opt):
    torch.autograd.grad(x, [x], is_grads_batched=True)
    torch.optim.swa_utils.AveragedModel
    opt.register_step_pre_hook(print)
    private.foreach_norm([x], 2)
"""
    assert offenders(clean) == []


def test_the_rule_lets_the_packages_own_and_public_api_pass():
    clean = """
import sys
import tensorflow as tf
import tensorflow.compat.v1 as tf1
from tb_gradscope import _tf_private as private

class Recorder:
    def step(self, recorder, fetches, writer, entry):
        self._x = 1
        recorder._s.every
        self._recorder._before(None)
        writer._gradscope_token = 3
        hasattr(fetches, "_fields")
        entry._replace(loss=abs)
        sys._getframe(1)
        private.tape_is_persistent(None)
        tf.compat.v1.get_default_graph()
        fetches.__class__
"""
    assert offenders(clean, allowed={"tape_is_persistent"}) == []


def test_no_module_but_tf_private_uses_private_tensorflow_or_keras_api():
    allowed = _exported()
    found = []
    for path in _modules():
        found += offenders(path.read_text(), str(path.relative_to(PACKAGE_DIR)), allowed)
    assert found == [], "private TF/Keras API outside _tf_private.py:\n" + "\n".join(found)


def test_the_listed_own_attributes_are_the_packages_and_still_used():
    """Each PACKAGE_OWN name is set or defined by a tb_gradscope class, and read across objects somewhere."""
    defined, used = set(), set()
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defined.add(node.name)
            elif isinstance(node, ast.Attribute):
                owner = node.value
                if isinstance(owner, ast.Name) and owner.id == "self":
                    if isinstance(node.ctx, ast.Store):
                        defined.add(node.attr)
                else:
                    used.add(node.attr)
    assert set(PACKAGE_OWN) <= defined, f"not the package's own: {set(PACKAGE_OWN) - defined}"
    assert set(PACKAGE_OWN) <= used, (
        f"listed but no longer read across objects: {set(PACKAGE_OWN) - used}"
    )


def test_tf_private_is_a_leaf_imported_by_the_write_side_only():
    tree = ast.parse(PRIVATE_MODULE.read_text())
    own = [
        n.module
        for n in ast.walk(tree)
        if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tb_gradscope")
    ]
    own += [
        a.name
        for n in ast.walk(tree)
        if isinstance(n, ast.Import)
        for a in n.names
        if a.name.startswith("tb_gradscope")
    ]
    assert own == [], f"_tf_private imports {own}"
    importers = _importers()
    assert importers <= {"record", "analysis", "pairs", "integrations", "_naming"}, importers
    assert {"record", "analysis", "integrations"} <= importers  # the walk sees them


def _class_names(source: str) -> list[str]:
    return [node.name for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ClassDef)]


# The same public API in each framework's package, one class each (the names).
FRAMEWORK_TWINS = {
    # Keras's, Lightning's, pytorch_lightning's and Stable-Baselines3's (each
    # framework takes only its own class).
    "GradscopeCallback": [
        "integrations/keras/__init__.py",
        "torch/lightning.py",
        "torch/pytorch_lightning.py",
        "torch/sb3.py",
    ],
    "Recorder": ["record/_recorder.py", "torch/_recorder.py"],
    "StartPoint": ["record/_losses.py", "torch/_losses.py"],
}


def test_every_class_name_in_the_package_is_unique():
    """One name, one thing: two unrelated classes both called `RuleSteps` (the
    TF2 recorder's and GraphRecorder's) read as one in a traceback or a grep.
    Only the public API each framework's package spells alike is twice."""
    where: dict[str, list[str]] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        for name in _class_names(path.read_text()):
            where.setdefault(name, []).append(str(path.relative_to(PACKAGE_DIR)))
    twice = {n: paths for n, paths in where.items() if len(paths) > 1}
    assert twice == FRAMEWORK_TWINS


def test_the_class_name_walk_sees_nested_classes():
    assert _class_names("class A:\n    class B:\n        pass\n") == ["A", "B"]


def test_the_record_package_exports_only_its_public_names():
    """The engine room's kernels (`RollUp`, `grad_table`, ...) are reached by
    their modules, never through `tb_gradscope.record`."""
    source = (PACKAGE_DIR / "record" / "__init__.py").read_text()
    exported = {
        alias.asname or alias.name
        for node in ast.parse(source).body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert exported == {
        "DriftMonitor",
        "GradscopeWarning",
        "NoWriterError",
        "Recorder",
        "StartPoint",
        "Stats",
    }
