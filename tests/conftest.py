"""Suite-wide fixtures: hygiene for process-global TensorFlow state, and the
correctness corpus trained once per session.

Op determinism is process-wide and has no public switch-off: a module that
turns it on (the demos do, to be reproducible) would make every later test's
unseeded random initializer fail. After each module it is back to what it was
when the session started.
"""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True, scope="session")
def _op_determinism_at_start() -> bool:
    from tensorflow.python.framework import config  # no public disable

    return config.is_op_determinism_enabled()


@pytest.fixture(autouse=True, scope="module")
def _module_keeps_op_determinism_to_itself(_op_determinism_at_start):
    from tensorflow.python.framework import config

    yield
    if config.is_op_determinism_enabled() and not _op_determinism_at_start:
        config.disable_op_determinism()


@pytest.fixture(scope="session")
def trained_shapes(tmp_path_factory):
    """Correctness-corpus shape -> (TrainedShape, ProductView), each shape trained
    once per session for every test module that judges it (tests/test_corpus.py,
    tests/test_doctor_corpus.py)."""
    from tests.corpus import harness

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
