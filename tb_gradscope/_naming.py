"""Variables -> names -> scope layout: the TF side of `tb_gradscope.scopes`.

A variable's full name is its Keras 3 `.path`, else its TF name (`tf.Module`
and TF1 variables), without TF's `:0` suffix. When a model is handed over, its
name (or the key it was given under) is the scope root, because Keras 3
functional models give their variables no model prefix; every Keras model
nested in it is a scope level of its own (`wgan/generator/dense_4`). Variables
are matched by their resource handle, which a Keras variable and the
`tf.Variable` inside it share.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import tensorflow as tf

from tb_gradscope import _tf_private as private
from tb_gradscope import scopes as scopes_lib


def variable_key(variable: Any) -> int:
    """A key that is the same for a Keras variable and the tf.Variable it wraps.

    A `tf.distribute` variable's `.handle` is its current replica's copy, so it
    is keyed by its first copy's handle (the one cross-replica code sees):
    every replica of a step then finds the same layout position.
    """
    distributed = _distributed(variable)
    if distributed is not None:
        variable = distributed.values[0]
    handle = getattr(variable, "handle", None)
    return id(handle) if handle is not None else id(variable)


def _distributed(variable: Any) -> Any:
    """The tf.distribute variable behind `variable` (itself or a Keras 3 wrapper's), if any."""
    if isinstance(variable, tf.distribute.DistributedValues):
        return variable
    inner = private.keras_inner_variable(variable)  # Keras 3 Variable -> its tf.Variable
    return inner if isinstance(inner, tf.distribute.DistributedValues) else None


def full_name(variable: Any) -> str:
    """`online/l1/kernel` from Keras 3 `.path` or the TF name (`Agent/w1:0`)."""
    path = getattr(variable, "path", None)
    name = path if isinstance(path, str) and path else variable.name
    return scopes_lib.variable_name(name)


def is_float_variable(variable: Any) -> bool:
    """Only floating-point variables can carry gradients (not counters, seeds)."""
    return tf.as_dtype(variable.dtype).is_floating


def model_roots(models: Any) -> list[tuple[str, Any]]:
    """Normalises `models` to [(root scope, model)].

    Accepts a mapping {root: model}, a sequence of models (each model's name is
    its root), or a single model.
    """
    if models is None:
        return []
    if isinstance(models, Mapping):
        pairs = [(str(k), m) for k, m in models.items()]
    elif isinstance(models, (list, tuple)):
        pairs = [(_model_name(m), m) for m in models]
    else:
        pairs = [(_model_name(models), models)]
    roots = [root for root, _ in pairs]
    for root in sorted({r for r in roots if roots.count(r) > 1}):
        raise ValueError(
            f"several models are named '{root}' (a keras.models.clone_model copy?): their "
            "variables would share scopes; pass models={'online': model, 'ema': copy, ...} "
            "to give each its own root"
        )
    for root, model in pairs:
        if not root or root.strip(scopes_lib.SEPARATOR) != root:
            raise ValueError(
                f"model root scope {root!r} is not a usable scope name; "
                "pass models={'online': model, ...} with plain names"
            )
        if not (hasattr(model, "weights") or hasattr(model, "variables")):
            raise ValueError(
                f"models[{root!r}] is a {type(model).__name__}, not a Keras model or "
                "tf.Module; pass models={'online': model, ...} with the models themselves"
            )
    return pairs


def model_variables(root: str, model: Any) -> list[tuple[Any, str]]:
    """The float variables of a model, named under `root`; optimizer slots excluded.

    Every Keras model nested in `model` is a scope level named after it
    (`wgan/generator/dense_4/kernel`), whether or not Keras put its name in
    the variable's path (a functional sub-model's variables carry none).
    The order is `model.weights`' (pairs match two models by it).
    """
    if hasattr(model, "weights") and hasattr(model, "trainable_weights"):
        variables = list(model.weights)  # Keras: weights only, no metric state
    else:
        variables = list(model.variables)
    optimizer = getattr(model, "optimizer", None)
    slots = {variable_key(v) for v in getattr(optimizer, "variables", None) or ()}
    chains = _sub_model_chains(model)
    named = []
    for v in variables:
        if not is_float_variable(v) or variable_key(v) in slots:
            continue
        chain = chains.get(variable_key(v), ())
        names = [name for _, name in chain]
        rest = _without_model_prefix(full_name(v), [_model_name(model), *names])
        named.append((v, scopes_lib.SEPARATOR.join([root, *(label for label, _ in chain), rest])))
    return named


def _sub_model_chains(model: Any) -> dict[int, tuple[tuple[str, str], ...]]:
    """variable_key -> (scope label, model name) of the nested Keras models
    holding it, outermost first.

    A variable belongs to the nested model holding it directly (in one of its
    own layers, not in a model nested in it); of several such places (a
    generator inside a `combined` model too), the shallowest, then the first.
    Variables outside every nested model are not listed. A nested model's
    label is its name, unless a sibling has the same name (`sibling_labels`).
    """
    nested: list[tuple[tuple[tuple[str, str], ...], Any]] = []

    def walk(owner: Any, chain: tuple[tuple[str, str], ...]) -> None:
        for label, layer in sibling_labels(owner):  # every path: the shallowest wins below
            link = chain + ((label, _model_name(layer)),)
            nested.append((link, layer))
            walk(layer, link)

    if _is_keras_model(model):
        walk(model, ())
    chains: dict[int, tuple[tuple[str, str], ...]] = {}
    for chain, owner in sorted(nested, key=lambda item: len(item[0])):
        inner = {variable_key(v) for sub in _sub_models(owner) for v in sub.weights}
        for v in owner.weights:
            if variable_key(v) not in inner:
                chains.setdefault(variable_key(v), chain)
    return chains


def sibling_labels(owner: Any) -> list[tuple[str, Any]]:
    """(scope label, model) of the Keras models nested directly in `owner`.

    Two networks never share scopes: siblings with one name (an EMA made by
    `keras.models.clone_model` beside its online network) are labelled by
    the attributes `owner` holds them by (`ema_network`), else numbered, and
    the collision is said in a warning.
    """
    subs = _sub_models(owner)
    names = [_model_name(m) for m in subs]
    clashing = {n for n in names if names.count(n) > 1}
    if not clashing:
        return list(zip(names, subs))
    held = {id(value): attr for attr, value in _attributes(owner) if _is_keras_model(value)}
    labels = []
    for i, (name, sub) in enumerate(zip(names, subs)):
        label = held.get(id(sub)) if name in clashing else name
        if label is None or label in labels or label in names[:i] + names[i + 1 :]:
            label = f"{name}_{names[: i + 1].count(name)}"
        labels.append(label)
    renamed = ", ".join(f"{labels[i]}" for i, n in enumerate(names) if n in clashing)
    warnings.warn(
        f"model '{_model_name(owner)}' holds several networks named "
        + ", ".join(f"'{n}'" for n in sorted(clashing))
        + f" (a clone_model copy?): their scopes are {renamed}, so that they do not fold "
        "into one; give the models distinct names to choose the scopes yourself",
        UserWarning,
        stacklevel=2,
    )
    return list(zip(labels, subs))


def untracked_variables(root: str, model: Any) -> list[tuple[Any, str]]:
    """Float `tf.Variable`s a layer of `model` holds as attributes that Keras does
    not track (not in `model.weights`: Keras 3 tracks only its own Variables),
    named `<root>/<layer>/<variable>`. `fit` never trains them."""
    tracked = {variable_key(v) for v in getattr(model, "weights", ())}
    found: list[tuple[Any, str]] = []
    seen: set[int] = set()
    visited: set[int] = set()
    todo = [model]
    while todo:
        layer = todo.pop(0)
        if id(layer) in visited:
            continue
        visited.add(id(layer))
        for _, value in _attributes(layer):
            if not isinstance(value, tf.Variable) or not is_float_variable(value):
                continue
            key = variable_key(value)
            if key not in tracked and key not in seen:
                seen.add(key)
                base = scopes_lib.variable_name(value.name).rpartition(scopes_lib.SEPARATOR)[2]
                parts = [root] + ([layer.name] if layer is not model else []) + [base]
                found.append((value, scopes_lib.SEPARATOR.join(parts)))
        todo += list(getattr(layer, "layers", None) or ())
        todo += [sub for _, sub in _attributes(layer) if _is_layer_like(sub)]
    return found


def _is_layer_like(obj: Any) -> bool:
    return (
        hasattr(obj, "weights")
        and isinstance(getattr(obj, "name", None), str)
        and hasattr(obj, "trainable")
    )


def _attributes(owner: Any) -> list[tuple[str, Any]]:
    """The attributes set on a (subclassed) model, in the order they were set."""
    return [(k, v) for k, v in vars(owner).items() if not k.startswith("_")]


def _sub_models(owner: Any) -> list[Any]:
    return [layer for layer in getattr(owner, "layers", None) or () if _is_keras_model(layer)]


def _is_keras_model(obj: Any) -> bool:
    """A Keras model (functional, Sequential or subclassed; Keras 3 or tf_keras): it lists its layers."""
    return (
        hasattr(obj, "layers")
        and hasattr(obj, "trainable_weights")
        and isinstance(getattr(obj, "name", None), str)
    )


def _without_model_prefix(name: str, models: Sequence[str]) -> str:
    """`name` without the longest run of its models' names leading it.

    Keras prefixes a variable with the models it was built under: none for a
    functional model, the Sequential's own name, the whole chain for a
    sub-model built inside its parent's `call`.
    """
    parts = name.split(scopes_lib.SEPARATOR)
    for start in range(len(models)):
        prefix = list(models[start:])
        if len(parts) > len(prefix) and parts[: len(prefix)] == prefix:
            return scopes_lib.SEPARATOR.join(parts[len(prefix) :])
    return name


@dataclasses.dataclass(frozen=True)
class VariableLayout:
    """The recorder's variables in scope-layout order.

    Attributes:
      layout: the scope tree (rows of every table) and its members.
      variables: the kept variables, index-aligned with `layout.variable_names`.
      positions: variable_key -> index into `variables`.
    """

    layout: scopes_lib.ScopeLayout
    variables: tuple[Any, ...]
    positions: Mapping[int, int]

    def index_of(self, variable: Any) -> int | None:
        return self.positions.get(variable_key(variable))

    def variable_scopes(self) -> list[tuple[Any, str]]:
        """Each variable with its leaf scope (after the depth cap)."""
        return list(zip(self.variables, self.layout.variable_leaf))


def build_variable_layout(
    named: Iterable[tuple[Any, str]], spec: scopes_lib.ScopeSpec | None = None
) -> VariableLayout:
    """Lays out named variables (first name wins for a variable seen twice)."""
    unique: list[tuple[Any, str]] = []
    seen: set[int] = set()
    for variable, name in named:
        key = variable_key(variable)
        if key not in seen and is_float_variable(variable):
            seen.add(key)
            unique.append((variable, name))
    layout = scopes_lib.build_layout([name for _, name in unique], spec)
    kept_names = set(layout.variable_names)
    kept = [v for v, name in unique if scopes_lib.variable_name(name) in kept_names]
    if len(kept) != len(layout.variable_names):
        raise AssertionError("scope layout and variables disagree")
    return VariableLayout(
        layout=layout,
        variables=tuple(kept),
        positions={variable_key(v): i for i, v in enumerate(kept)},
    )


def name_variables(
    variables: Sequence[Any], roots: Sequence[tuple[str, Any]]
) -> list[tuple[Any, str]]:
    """Names explicit variables: under their model's root if a model holds them."""
    by_key: dict[int, str] = {}
    for root, model in roots:
        for v, name in model_variables(root, model):
            by_key.setdefault(variable_key(v), name)
    return [(v, by_key.get(variable_key(v), full_name(v))) for v in variables]


def _model_name(model: Any) -> str:
    name = getattr(model, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(
            f"{type(model).__name__} has no name to use as its scope root; "
            "pass models={'online': model} instead"
        )
    return name
