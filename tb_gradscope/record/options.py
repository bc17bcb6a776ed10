"""Checks of the options every way of recording takes (Recorder, the Keras callbacks).

One message per mistake, wherever it is made: a recording frequency that is
not a positive int, scopes that are not a ScopeSpec, a logdir that is no
path, a name that cannot name a tf.Module.
"""

from __future__ import annotations

import os
from typing import Any

from tb_gradscope.scopes import ScopeSpec


# Steps are int64 in the graph: a larger period would overflow the step test.
MAX_EVERY = 2**62


def check_every(value: Any, name: str, unit: str) -> None:
    """Raises ValueError unless `value` (the argument `name`) is an int in [1, MAX_EVERY]."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{name} must be an int >= 1, got {value!r}; "
            f"e.g. {name}=10 records {unit} 0, 10, 20, ..."
        )
    if value > MAX_EVERY:
        raise ValueError(
            f"{name} is {value}, more than 2**62: {unit} are int64 in the graph and "
            f"recording would stop after the first; use a period that fits"
        )


def check_logdir(logdir: Any) -> None:
    """Raises ValueError unless `logdir` is None or a non-empty path."""
    if logdir is None:
        return
    if not isinstance(logdir, (str, os.PathLike)):
        raise ValueError(
            f"logdir must be a directory path (str or os.PathLike) or None for the default "
            f"tf.summary writer, got {type(logdir).__name__} {logdir!r}"
        )
    if not os.fspath(logdir):
        raise ValueError(
            "logdir is empty; pass a directory such as 'logs/run1', or None to write to the "
            "default tf.summary writer"
        )


def check_name(name: Any) -> None:
    """Raises ValueError unless `name` can name the recorder's tf.Module."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(
            f"name must be a Python identifier such as 'gradscope' (it names the recorder's "
            f"tf.Module and its messages), got {name!r}"
        )


def check_scopes(scopes: Any) -> None:
    """Raises ValueError unless `scopes` is None or a ScopeSpec."""
    if scopes is not None and not isinstance(scopes, ScopeSpec):
        raise ValueError(f"scopes must be a tb_gradscope.scopes.ScopeSpec, got {type(scopes).__name__}")
