"""The public/private line of the training side, optax-style: a user-facing
package's `__init__` exports its public names and every module beside it is
private by its leading underscore, so `from tb_gradscope.record import X`
is the API and `tb_gradscope.record._stats` visibly is not."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

import tb_gradscope

PACKAGE_DIR = Path(tb_gradscope.__file__).parent

PUBLIC_PACKAGES = {
    "tb_gradscope.record": {
        "DriftMonitor",
        "GradscopeWarning",
        "NoWriterError",
        "Recorder",
        "StartPoint",
        "Stats",
    },
    "tb_gradscope.pairs": {"Pair", "detect_pairs", "pair_ema", "pair_models", "pair_prefixes"},
    "tb_gradscope.analysis": {
        "AnalysisError",
        "UNTRACED_MESSAGE",
        "analyze_function",
        "analyze_graph",
        "fingerprint",
        "untraced_message",
    },
    "tb_gradscope.integrations.keras": {"GradscopeCallback", "LegacyGradscopeCallback"},
    "tb_gradscope.integrations.tf1": {"GraphRecorder", "StartPoint", "pair_scopes"},
    "tb_gradscope.torch": {"GradscopeWarning", "Recorder", "StartPoint", "pair_models"},
}

# Public modules beside a public __init__: framework integrations imported on
# their own (each imports one more library), with the names they export.
PUBLIC_INTEGRATIONS = {
    "tb_gradscope.torch": {
        "lightning": {"GradscopeCallback"},
        "pytorch_lightning": {"GradscopeCallback"},
        "sb3": {"GradscopeCallback"},
    },
}

# The root's own modules: the entry points and the scope tree are public.
PUBLIC_ROOT_MODULES = {"cli", "scopes", "testing"}


def _modules(package: str) -> list[str]:
    folder = PACKAGE_DIR.joinpath(*package.split(".")[1:])
    return sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("package", sorted(PUBLIC_PACKAGES))
def test_modules_beside_a_public_init_are_underscored(package):
    public = [m for m in _modules(package) if not m.startswith("_")]
    expected = sorted(PUBLIC_INTEGRATIONS.get(package, {}))
    assert public == expected, f"{package}: modules without a leading underscore: {public}"


@pytest.mark.parametrize(
    "module, names",
    [(f"{p}.{m}", names) for p, mods in PUBLIC_INTEGRATIONS.items() for m, names in mods.items()],
)
def test_an_integration_module_exports_exactly_its_public_names(module, names):
    pytest.importorskip(module)
    assert set(importlib.import_module(module).__all__) == names


@pytest.mark.parametrize("package", sorted(PUBLIC_PACKAGES))
def test_a_public_init_exports_exactly_its_public_names(package):
    module = importlib.import_module(package)
    assert set(module.__all__) == PUBLIC_PACKAGES[package]
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"


def test_the_root_marks_its_private_modules():
    public = {p.stem for p in PACKAGE_DIR.glob("*.py")} - {"__init__"}
    assert {m for m in public if not m.startswith("_")} == PUBLIC_ROOT_MODULES
