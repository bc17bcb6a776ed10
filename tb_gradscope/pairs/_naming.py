"""Names of paired variables, shared with the recorder (`tb_gradscope._naming`).

Adds what pairing needs on top: naming a mixed variable list under model roots,
and recognising optimizer slot variables, which are never scopes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tb_gradscope import _naming as var_naming
from tb_gradscope import _tf_private as private

full_name = var_naming.full_name
variable_key = var_naming.variable_key
model_variables = var_naming.model_variables

# TF1 slots (`w/Adam_1`, `beta1_power`) and Keras 3 optimizer variables
# (`adam/dense_kernel_momentum`, `adam/iteration`).
_SLOT_LEAF = re.compile(
    r"^(Adam|Adam_\d+|RMSProp|RMSProp_\d+|Momentum|Adagrad|Adadelta|Adadelta_\d+|"
    r"Ftrl|Ftrl_\d+|Nadam|Nadam_\d+|beta1_power|beta2_power|iteration|iterations|"
    r"learning_rate|.+_(momentum|velocity|momentums|velocities|average))$"
)


def is_slot_name(name: str) -> bool:
    """True for names of optimizer slots and counters, which are never scopes."""
    return bool(_SLOT_LEAF.match(name.rsplit("/", 1)[-1]))


def model_name(model: Any) -> str:
    """A model's name, the root of its scopes."""
    roots = var_naming.model_roots(model)
    return roots[0][0]


def named(variables: Sequence[Any], models: Any = None) -> list[tuple[Any, str]]:
    """Float variables with their full names, under their model's root if given.

    Variables of the `models` themselves are used when `variables` is empty.
    """
    roots = var_naming.model_roots(models)
    if not variables:
        out = [item for root, model in roots for item in model_variables(root, model)]
    else:
        out = var_naming.name_variables(
            [v for v in variables if var_naming.is_float_variable(v)], roots
        )
    seen: set[int] = set()
    unique = []
    for v, n in out:
        if variable_key(v) not in seen:
            seen.add(variable_key(v))
            unique.append((v, n))
    return unique


def optimizer_variable_keys(optimizers: Sequence[Any]) -> set[int]:
    """Keys of every variable the optimizers own (slots) or write (their targets).

    Keras 3 optimizers record the variables they were built for; TF1-style
    optimizers are not introspected here (pass `written_by_optimizer`).
    """
    keys: set[int] = set()
    for opt in optimizers:
        for v in private.optimizer_built_variables(opt) or ():
            keys.add(variable_key(v))
    return keys


def optimizer_slot_keys(optimizers: Sequence[Any]) -> set[int]:
    """Keys of the optimizers' own variables (slots, counters)."""
    return {variable_key(v) for opt in optimizers for v in getattr(opt, "variables", ()) or ()}
