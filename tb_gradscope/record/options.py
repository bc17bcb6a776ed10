"""Checks of the options every way of recording takes (Recorder, the Keras callbacks).

One message per mistake, wherever it is made: a recording frequency that is
not a positive int, scopes that are not a ScopeSpec.
"""

from __future__ import annotations

from typing import Any

from tb_gradscope.scopes import ScopeSpec


def check_every(value: Any, name: str, unit: str) -> None:
    """Raises ValueError unless `value` (the argument `name`) is an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"{name} must be an int >= 1, got {value!r}; "
            f"e.g. {name}=10 records {unit} 0, 10, 20, ..."
        )


def check_scopes(scopes: Any) -> None:
    """Raises ValueError unless `scopes` is None or a ScopeSpec."""
    if scopes is not None and not isinstance(scopes, ScopeSpec):
        raise ValueError(f"scopes must be a tb_gradscope.scopes.ScopeSpec, got {type(scopes).__name__}")
