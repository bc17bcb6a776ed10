"""Suite-wide hygiene for process-global TensorFlow state.

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
