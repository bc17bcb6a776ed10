"""Checks of the options every way of recording takes (Recorder, the Keras callbacks).

One message per mistake, wherever it is made: a recording frequency that is
not a positive int, scopes that are not a ScopeSpec, a logdir that is no
path, a name that cannot name a tf.Module, gradient columns that are not
optional ones.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Any

from tb_gradscope.format.metadata import OPTIONAL_GRAD_COLUMNS
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
        raise ValueError(
            f"scopes must be a tb_gradscope.scopes.ScopeSpec, got {type(scopes).__name__}"
        )


def check_grad_columns(columns: Any) -> tuple[str, ...]:
    """The optional gradient columns to record, in table order.

    Raises ValueError unless `columns` is a collection of names from
    OPTIONAL_GRAD_COLUMNS (a bare string is refused: it would read as letters).
    """
    names = ", ".join(repr(c) for c in OPTIONAL_GRAD_COLUMNS)
    if isinstance(columns, (str, bytes)) or not isinstance(columns, Collection):
        raise ValueError(
            f"grad_columns must be a tuple of column names from {names}, got {columns!r}; "
            f"e.g. grad_columns=() records only grad_vars, l2 and nonfinite"
        )
    unknown = [c for c in columns if c not in OPTIONAL_GRAD_COLUMNS]
    if unknown:
        raise ValueError(
            f"grad_columns: unknown column {unknown[0]!r}; the optional columns are {names} "
            f"(grad_vars, l2 and nonfinite are always recorded)"
        )
    return tuple(c for c in OPTIONAL_GRAD_COLUMNS if c in columns)
