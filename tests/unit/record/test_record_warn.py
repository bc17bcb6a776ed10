"""A recorder's warning is printed once, whatever the user's logging setup."""

from __future__ import annotations

import os
import subprocess
import sys

_PROGRAM = """
import logging, sys
from tb_gradscope.record._warn import warn_once
if sys.argv[1] == "configured":
    logging.basicConfig(level=logging.WARNING, format="log: %(message)s")
warn_once("key", "step 4's update was not measured")
warn_once("key", "step 4's update was not measured")
"""


def _stderr(setup: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-c", _PROGRAM, setup],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=True,
    )
    return done.stderr


def test_a_warning_is_printed_once_without_logging_configured():
    assert _stderr("bare").count("was not measured") == 1


def test_a_configured_logger_receives_the_warning_too():
    err = _stderr("configured")
    assert "log: step 4's update was not measured" in err
