"""Suite-wide fixtures: hygiene for process-global TensorFlow state, the
correctness corpus trained once per session, and the work units a
pytest-xdist run hands to its workers.

Op determinism is process-wide and has no public switch-off: a module that
turns it on (the demos do, to be reproducible) would make every later test's
unseeded random initializer fail. After each module it is back to what it was
when the session started.
"""

from __future__ import annotations

import importlib.util

import pytest

# A process that has imported tensorflow segfaults the first time torch loads
# triton (an optimizer's constructor imports torch._dynamo): every worker runs
# TF and torch tests, so torch._dynamo comes first, before any test module.
if importlib.util.find_spec("torch") is not None:
    import torch._dynamo  # noqa: F401

# The browser tests' helpers assert; rewritten before any test module imports them.
pytest.register_assert_rewrite(
    "tests.support.frontend_fixtures", "tests.support.frontend_logs", "tests.support.frontend_tab"
)


# The PyTorch tests also run where tensorflow is not installed (`pip install
# '.[torch]' pytest`): the TF hygiene below then has nothing to keep.
HAS_TENSORFLOW = importlib.util.find_spec("tensorflow") is not None


@pytest.fixture(autouse=True, scope="session")
def _op_determinism_at_start() -> bool:
    if not HAS_TENSORFLOW:
        return False
    from tensorflow.python.framework import config  # no public disable

    return config.is_op_determinism_enabled()


@pytest.fixture(autouse=True, scope="module")
def _module_keeps_op_determinism_to_itself(_op_determinism_at_start):
    yield
    if not HAS_TENSORFLOW:
        return
    from tensorflow.python.framework import config

    if config.is_op_determinism_enabled() and not _op_determinism_at_start:
        config.disable_op_determinism()


@pytest.fixture(autouse=True, scope="module")
def _module_keeps_torch_settings_to_itself():
    """The PyTorch demos make torch deterministic and single-threaded for the
    whole process (as `tb-gradscope demo` wants); later modules get the
    settings the module before them started with."""
    if importlib.util.find_spec("torch") is None:
        yield
        return
    import torch

    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    yield
    torch.use_deterministic_algorithms(deterministic)
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def trained_shapes(tmp_path_factory):
    """Correctness-corpus shape -> (TrainedShape, ProductView), each shape trained
    once per session for every test module that judges it (tests/e2e/corpus/test_corpus.py,
    tests/e2e/corpus/test_doctor_corpus.py)."""
    from tests.support.corpus import harness

    cache: dict[str, object] = {}
    root = str(tmp_path_factory.mktemp("corpus"))

    def get(shape):
        if shape.name not in cache:
            try:
                trained = harness.train(shape, root)
                cache[shape.name] = (trained, harness.ProductView(trained))
            except Exception as e:  # train once: every test of the shape reports the same failure
                cache[shape.name] = e
        if isinstance(cache[shape.name], Exception):
            raise cache[shape.name]
        return cache[shape.name]

    return get


@pytest.fixture(scope="session")
def trained_torch_shapes(tmp_path_factory):
    """PyTorch corpus shape -> (TrainedShape, ProductView), each shape trained
    once per session for every test module that judges it
    (tests/e2e/torch_corpus/test_torch_corpus.py, test_torch_doctor_corpus.py)."""
    from tests.support.corpus.harness import ProductView
    from tests.support.torch_corpus import harness

    cache: dict[str, object] = {}
    root = str(tmp_path_factory.mktemp("torch_corpus"))

    def get(shape):
        if shape.name not in cache:
            try:
                trained = harness.train(shape, root)
                cache[shape.name] = (trained, ProductView(trained))
            except Exception as e:  # train once: every test of the shape reports the same failure
                cache[shape.name] = e
        if isinstance(cache[shape.name], Exception):
            raise cache[shape.name]
        return cache[shape.name]

    return get


# With pytest-xdist, `pytest tests -n 2 --dist loadgroup --no-loadscope-reorder`
# runs two workers. A work unit is a test file (its module fixtures are built
# once, its tests run in file order: some check counts the file's earlier tests
# left), except that files sharing an expensive session fixture share a unit,
# so one worker builds it: they are listed here. The workers check the list
# against the fixtures the tests really use (`_check_units`).
SHARED_UNITS = [
    ("tests/e2e/corpus/test_corpus.py", "tests/e2e/corpus/test_doctor_corpus.py"),  # trained_shapes
    (
        "tests/e2e/torch_corpus/test_torch_corpus.py",
        "tests/e2e/torch_corpus/test_torch_doctor_corpus.py",
    ),  # trained_torch_shapes
    tuple(
        f"tests/e2e/frontend/test_frontend_{name}.py"
        for name in (  # the session's TensorBoard
            "charts",
            "compare",
            "events",
            "findings",
            "graph",
            "matrix",
            "names",
            "numbers",
            "theme",
            "torch",
        )
    ),
]
UNIT_OF = {path: unit[0] for unit in SHARED_UNITS for path in unit}

# Session fixtures every worker may build for itself: cheap, or process-wide
# state each worker must have anyway.
PER_WORKER = {"_op_determinism_at_start", "browser"}


def _unit(nodeid: str) -> str:
    path = nodeid.split("::")[0]
    return UNIT_OF.get(path, path)


def _shared_fixtures(item: pytest.Item) -> set[str]:
    """The expensive session fixtures (defined in tests/) an item needs, directly or not."""
    defs = getattr(item, "_fixtureinfo", None)
    found = set()
    for name, fixturedefs in defs.name2fixturedefs.items() if defs else ():
        fixturedef = fixturedefs[-1]
        module = getattr(fixturedef.func, "__module__", "")
        if fixturedef.scope == "session" and module.startswith("tests.") and name not in PER_WORKER:
            found.add(f"{module}.{name}")
    return found


def _check_units(items: list[pytest.Item]) -> None:
    """Refuses to run when two work units need the same expensive session
    fixture (each worker would build it): SHARED_UNITS must name them."""
    users: dict[str, set[str]] = {}
    for item in items:
        for fixture in _shared_fixtures(item):
            users.setdefault(fixture, set()).add(item.nodeid.split("::")[0])
    for fixture, paths in sorted(users.items()):
        if len({UNIT_OF.get(path, path) for path in paths}) > 1:
            raise pytest.UsageError(
                f"{', '.join(sorted(paths))} share the session fixture {fixture}: "
                "list them together in SHARED_UNITS (tests/conftest.py)"
            )


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, when installed
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """With `--dist loadgroup`: whole work units (SHARED_UNITS, else a file) go to
    one worker each, in the order the workers collected them."""
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _unit(nodeid)

    return UnitScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On the workers of `pytest -n 2 --dist loadgroup --no-loadscope-reorder`:
    checks SHARED_UNITS, then puts the costliest-looking units first (most
    files, then most slow tests), so the small fast ones fill in at the end
    and neither worker idles through a long tail."""
    if not config.getoption("loadgroup", False):  # xdist sets it on its workers
        return
    _check_units(items)
    files: dict[str, set[str]] = {}
    slow: dict[str, int] = {}
    for item in items:
        unit = _unit(item.nodeid)
        files.setdefault(unit, set()).add(item.nodeid.split("::")[0])
        slow[unit] = slow.get(unit, 0) + bool(item.get_closest_marker("slow"))
    order = sorted(slow, key=lambda unit: (-len(files[unit]), -slow[unit]))
    rank = {unit: i for i, unit in enumerate(order)}
    items.sort(key=lambda item: rank[_unit(item.nodeid)])
