"""The oracle: each (loss, scope) cell's flow state by brute force.

Independent of tb_gradscope's `analysis/`, `record/` and `rules/`: it runs
TensorFlow on the shape's own step and asks three questions per (loss,
variable), from the state before the step:

1. gradient: does the gradient of that loss alone, taken with the step's own
   tape structure (TF1: `tf.gradients`), exist and is it non-zero?
2. dependence: perturb the variable, recompute the loss from the same inputs:
   does its value change? (Variables are perturbed in groups first, split in
   halves while the loss moves: most are independent, settled in one pass.)
3. own update: from a snapshot, run only the optimizer step that consumes this
   loss's gradient (TF1: its train op): does the variable move?

State: gradient -> `updates` if the own update moved it, else `ignored`; no
gradient -> `blocked` if dependent, else `independent`. A scope is a
variable's parent path (the variable itself at top level); every ancestor
rolls up its children, taking the most flowing one. Every variable and
optimizer slot it touches is restored, bit for bit.

Per-path cuts (`blocked(l, s, except_via=x)`: every path from s to l that
avoids x is cut): the same three questions with the paths through x silenced,
every weight matrix of x (variables of rank >= 2) set to zero and its biases
to fixed noise, so x's output is a non-zero constant of its input and no
gradient crosses it. Then a gradient
into s arrived by a path avoiding x, and a dependence without one is a path
avoiding x that is cut (`silenced_truth`). TF2 shapes only.
"""

from __future__ import annotations

import dataclasses
import fnmatch
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf

from tests.support.corpus.spec import PairProbe, StepProbe, TF1Probe

UPDATES, IGNORED, BLOCKED, INDEPENDENT = "updates", "ignored", "blocked", "independent"
FLOW_ORDER = (UPDATES, IGNORED, BLOCKED, INDEPENDENT)  # most flowing first

# Perturbations tried for dependence: (seed, scale relative to the variable's size).
_PERTURBATIONS = ((1, 0.5), (2, 3.0))


@dataclasses.dataclass(frozen=True)
class VariableFacts:
    """The three brute-force facts of one (loss, variable) and the state they give."""

    gradient: bool
    dependent: bool
    moved: bool

    @property
    def state(self) -> str:
        if self.gradient:
            return UPDATES if self.moved else IGNORED
        return BLOCKED if self.dependent else INDEPENDENT


@dataclasses.dataclass(frozen=True)
class StepTruth:
    """The oracle's answer at one step.

    Attributes:
      facts: loss -> variable full name -> facts.
      states: loss -> scope -> flow state (leaves and every roll-up).
      silenced: scope pattern -> the truth with the paths through the scopes
        it matches silenced (`silenced_truth`), for the patterns the shape's
        `except_via` rules name.
    """

    facts: Mapping[str, Mapping[str, VariableFacts]]
    states: Mapping[str, Mapping[str, str]]
    silenced: Mapping[str, StepTruth] = dataclasses.field(default_factory=dict)

    def blocked_producers(self, loss: str) -> set[str]:
        """Leaf scopes the loss depends on but gets no gradient from (the
        scope as a whole: a BatchNorm layer whose statistics get no gradient
        but whose gamma does is not blocked)."""
        leaves = {leaf_scope(name) for name in self.facts[loss]}
        return {leaf for leaf in leaves if self.states[loss][leaf] == BLOCKED}


# ----- names and scopes (the product's convention, written out again) -------


def named_variables(models: Mapping[str, Any]) -> dict[str, Any]:
    """{`<key>/<sub-models>/<path>`: variable} for {key: model}, as the product names them.

    The path is a Keras 3 variable's `.path`, else its TF name without `:0`.
    Each Keras model nested in the model is a level named after it (its
    variables carry that name only when built under it: a functional
    sub-model's carry none), and the names of the models a path already
    starts with are not repeated. Only float variables.
    """
    out: dict[str, Any] = {}
    for key, model in models.items():
        keras_like = hasattr(model, "weights") and hasattr(model, "trainable_weights")
        variables = model.weights if keras_like else model.variables
        levels = _sub_model_levels(model) if isinstance(model, keras.Model) else {}
        for v in variables:
            if not tf.as_dtype(v.dtype).is_floating:
                continue
            path = getattr(v, "path", None) or v.name
            if path.endswith(":0"):
                path = path[:-2]
            chain = levels.get(id(v), [])
            owners = [getattr(model, "name", "")] + chain
            for i in range(len(owners)):  # the longest run of owner names leading the path
                lead = "/".join(owners[i:]) + "/"
                if path.startswith(lead):
                    path = path[len(lead) :]
                    break
            out.setdefault("/".join([key] + chain + [path]), v)
    return out


def _sub_model_levels(model: Any) -> dict[int, list[str]]:
    """id(variable) -> names of the nested models down to the one whose own
    layers hold it; of several such places, the one the fewest levels down."""
    found: list[tuple[list[str], Any]] = []
    todo = [([], model)]
    while todo:  # breadth first: shallower places are found first
        chain, m = todo.pop(0)
        for layer in m.layers:
            if isinstance(layer, keras.Model):
                found.append((chain + [layer.name], layer))
                todo.append((chain + [layer.name], layer))
    levels: dict[int, list[str]] = {}
    for chain, m in found:
        below = {id(v) for sub in m.layers if isinstance(sub, keras.Model) for v in sub.weights}
        for v in m.weights:
            if id(v) not in below and id(v) not in levels:
                levels[id(v)] = chain
    return levels


def leaf_scope(name: str) -> str:
    """`a/b/kernel` -> `a/b`; a top-level variable is its own scope."""
    head, _, _ = name.rpartition("/")
    return head or name


def roll_up(variable_states: Mapping[str, str]) -> dict[str, str]:
    """Variable states -> every scope's state (the most flowing child wins)."""
    out: dict[str, str] = {}
    for name, state in variable_states.items():
        parts = leaf_scope(name).split("/")
        for i in range(len(parts)):
            scope = "/".join(parts[: i + 1])
            old = out.get(scope)
            if old is None or FLOW_ORDER.index(state) < FLOW_ORDER.index(old):
                out[scope] = state
    return out


# ----- TF2 -------------------------------------------------------------------


def tf2_truth(probe: StepProbe) -> StepTruth:
    """Runs the three questions eagerly on a TF2 step probe; restores everything."""
    names = list(probe.variables)
    variables = [probe.variables[n] for n in names]
    snapshot = _Snapshot(variables, probe.optimizers)
    facts: dict[str, dict[str, VariableFacts]] = {}
    try:
        for loss in probe.losses:
            forward = loss.forward()
            grads = forward.tape.gradient(
                forward.value, variables, output_gradients=forward.output_gradients
            )
            base = _value(forward.value)
            has_grad = [_nonzero(g) for g in grads]

            def value():
                return _value(loss.forward().value)

            found = _dependent(
                [i for i, g in enumerate(has_grad) if not g],
                lambda idx: _changes([variables[i] for i in idx], _eager_io, value, base),
            )
            dependent = [g or i in found for i, g in enumerate(has_grad)]
            snapshot.restore()
            before = [v.numpy().copy() for v in variables]
            loss.update()
            moved = [not np.array_equal(b, v.numpy()) for b, v in zip(before, variables)]
            snapshot.restore()
            facts[loss.name] = {
                n: VariableFacts(g, d, m) for n, g, d, m in zip(names, has_grad, dependent, moved)
            }
    finally:
        snapshot.restore()
    return _truth(facts)


def silenced_truth(probe: StepProbe, pattern: str) -> StepTruth:
    """`tf2_truth` with every weight matrix (rank >= 2) of the scopes matching
    `pattern` (or below one) set to zero and their other variables (biases) to
    fixed noise: their output is then a constant of their input, and not a
    degenerate one (zero biases would make it 0, which a normalized loss
    reads as no dependence at all), so a gradient still reaching a scope came
    by a path avoiding them. Restores the variables, bit for bit."""
    if isinstance(probe, TF1Probe):
        raise AssertionError("the oracle judges except_via rules on TF2 shapes only")
    silenced = [v for n, v in probe.variables.items() if under(leaf_scope(n), pattern)]
    if not any(len(v.shape) >= 2 for v in silenced):
        raise AssertionError(
            f"except_via={pattern}: no weight matrix to silence in {sorted(probe.variables)}"
        )
    saved = [v.numpy().copy() for v in silenced]
    rng = np.random.default_rng(0)
    try:
        for v, value in zip(silenced, saved):
            quiet = (
                np.zeros_like(value)
                if value.ndim >= 2
                else rng.normal(size=value.shape).astype(value.dtype)
            )
            v.assign(quiet)
        return tf2_truth(probe)
    finally:
        for v, value in zip(silenced, saved):
            v.assign(value)


def except_via_patterns(rules: Sequence[str]) -> list[str]:
    """The scope patterns the `except_via` of `rules` name, each once."""
    return list(dict.fromkeys(p for rule in rules for p in _parse(rule)[2]))


class _Snapshot:
    """Every variable and optimizer slot, restorable; slots an optimizer creates
    after the snapshot (its lazy build) are reset to zero, their initial value."""

    def __init__(self, variables: Sequence[Any], optimizers: Sequence[Any]):
        self._optimizers = list(optimizers)
        self._known = {id(v) for v in self._all(variables)}
        self._values = [(v, v.numpy().copy()) for v in self._all(variables)]

    def _all(self, variables: Sequence[Any]) -> list[Any]:
        slots = [v for opt in self._optimizers for v in getattr(opt, "variables", ())]
        return list(variables) + slots

    def restore(self) -> None:
        for v, value in self._values:
            v.assign(value)
        for opt in self._optimizers:
            for v in getattr(opt, "variables", ()):
                if id(v) not in self._known:
                    v.assign(
                        np.zeros(v.shape, v.dtype.name if hasattr(v.dtype, "name") else v.dtype)
                    )


def _dependent(candidates: list[int], changes: Callable[[list[int]], bool]) -> set[int]:
    """The candidates whose perturbation changes the loss, found by group
    testing: perturb a group at once; if the loss moves, split it in halves.
    (Most variables a loss does not get a gradient from are independent of it,
    so most groups are settled with one or two forward passes.)"""
    if not candidates or not changes(candidates):
        return set()
    if len(candidates) == 1:
        return set(candidates)
    half = len(candidates) // 2
    return _dependent(candidates[:half], changes) | _dependent(candidates[half:], changes)


def _changes(variables: Sequence[Any], io: tuple, value: Callable[[], Any], base: Any) -> bool:
    """Whether adding noise to `variables` together changes the loss value
    (tried at two noise scales, relative to each variable's size); restores them."""
    read, write = io
    originals = [np.asarray(read(v)).copy() for v in variables]
    try:
        for seed, scale in _PERTURBATIONS:
            rng = np.random.default_rng(seed)
            for v, original in zip(variables, originals):
                size = float(np.abs(original).mean()) + 1.0
                noise = rng.normal(0.0, scale * size, original.shape)
                write(v, (original + noise).astype(original.dtype))
            if not np.array_equal(np.asarray(value()), np.asarray(base)):
                return True
        return False
    finally:
        for v, original in zip(variables, originals):
            write(v, original)


_eager_io = (lambda v: v.numpy(), lambda v, x: v.assign(x))


def _session_io(sess: Any) -> tuple:
    return (lambda v: sess.run(v), lambda v, x: v.load(x, sess))


def _value(tensor: Any) -> np.ndarray:
    return np.asarray(tf.convert_to_tensor(tensor).numpy())


def _nonzero(gradient: Any) -> bool:
    if gradient is None:
        return False
    return bool(np.any(_value(gradient) != 0))


# ----- TF1 -------------------------------------------------------------------


class TF1Oracle:
    """The three questions in a TF1 session; its gradient ops are built once
    per graph by `prepare` (before the shape finalizes its graph)."""

    def __init__(self) -> None:
        self._grads: dict[int, dict[str, list[Any]]] = {}

    def prepare(self, probe: TF1Probe) -> None:
        graph = (
            probe.session.graph if probe.session is not None else tf.compat.v1.get_default_graph()
        )
        if id(graph) in self._grads:
            return
        variables = list(probe.variables.values())
        grads: dict[str, list[Any]] = {}
        with graph.as_default():
            for name, loss in probe.losses.items():
                tensor, seed = loss if isinstance(loss, tuple) else (loss, None)
                grads[name] = tf.compat.v1.gradients(tensor, variables, grad_ys=seed)
        self._grads[id(graph)] = grads

    def truth(self, probe: TF1Probe) -> StepTruth:
        sess, feed = probe.session, dict(probe.feed_dict)
        grads = self._grads.get(id(sess.graph))
        if grads is None:
            raise AssertionError(
                "the TF1 shape never called observer.prepare(probe) before finalizing its graph"
            )
        names = list(probe.variables)
        variables = [probe.variables[n] for n in names]
        with sess.graph.as_default():
            every = tf.compat.v1.global_variables()
        saved = sess.run(every)

        def restore():
            return [v.load(value, sess) for v, value in zip(every, saved)]

        facts: dict[str, dict[str, VariableFacts]] = {}
        try:
            for name, loss in probe.losses.items():
                tensor = loss[0] if isinstance(loss, tuple) else loss
                base = sess.run(tensor, feed)
                present = [(i, g) for i, g in enumerate(grads[name]) if g is not None]
                values = sess.run([g for _, g in present], feed) if present else []
                has_grad = [False] * len(variables)
                for (i, _), value in zip(present, values):
                    has_grad[i] = _nonzero_tf1(value)
                io = _session_io(sess)
                found = _dependent(
                    [i for i, g in enumerate(has_grad) if not g],
                    lambda idx: _changes(
                        [variables[i] for i in idx], io, lambda: sess.run(tensor, feed), base
                    ),
                )
                dependent = [g or i in found for i, g in enumerate(has_grad)]
                before = sess.run(variables)
                sess.run(probe.train_ops[name], feed)
                after = sess.run(variables)
                restore()
                moved = [not np.array_equal(b, a) for b, a in zip(before, after)]
                facts[name] = {
                    n: VariableFacts(g, d, m)
                    for n, g, d, m in zip(names, has_grad, dependent, moved)
                }
        finally:
            restore()
        return _truth(facts)


def _nonzero_tf1(value: Any) -> bool:
    values = getattr(value, "values", value)  # IndexedSlicesValue
    return bool(np.any(np.asarray(values) != 0))


def _truth(facts: Mapping[str, Mapping[str, VariableFacts]]) -> StepTruth:
    states = {loss: roll_up({n: f.state for n, f in per.items()}) for loss, per in facts.items()}
    return StepTruth(facts=facts, states=states)


# ----- rules, judged on the oracle's states ----------------------------------


def matches(scope: str, pattern: str) -> bool:
    """The rules' glob: `*` crosses `/`; `p/*` also matches `p` itself."""
    if fnmatch.fnmatchcase(scope, pattern):
        return True
    return pattern.endswith("/*") and fnmatch.fnmatchcase(scope, pattern[:-2])


def rule_holds(rule: str, truth: StepTruth) -> bool | None:
    """Whether a `never` / `only` / `blocked` rule holds on the oracle's states
    at one step (None: no loss of the step matches the rule's loss).

    `never(l, s)`: no scope matching s is `updates` for l. `only(l, [a, b])`:
    every `updates` scope of l is under an allowed scope, or a roll-up above
    one. `updates(l, [a, b])`: every scope matching a or b is `updates` for l
    (and one matches). `blocked(l, s)`: every scope matching s is `blocked` for l (and one
    matches). `blocked(l, s, except_via=[x, ...])`: the same on the truth with
    the paths through x silenced, over the scopes matching s outside x.
    `tracks` is not judged here (drift is compared separately).
    """
    kind, args, avoid = _parse(rule)
    losses = [loss for loss in truth.states if fnmatch.fnmatchcase(loss, args[0])]
    if not losses:
        return None
    if avoid:
        if len(avoid) != 1:
            raise ValueError(f"the oracle silences one except_via scope at a time, not {avoid}")
        judged = truth.silenced[avoid[0]]
        for loss in losses:
            hit = [
                st
                for sc, st in judged.states[loss].items()
                if matches(sc, args[1]) and not under(sc, avoid[0])
            ]
            if not hit or any(st != BLOCKED for st in hit):
                return False
        return True
    for loss in losses:
        states = truth.states[loss]
        if kind == "never":
            if any(st == UPDATES for sc, st in states.items() if matches(sc, args[1])):
                return False
        elif kind == "only":
            allowed = args[1:]
            for scope, state in states.items():
                if state != UPDATES:
                    continue
                inside = any(under(scope, a) for a in allowed)
                above = any(under(a, scope) for a in allowed)
                if not inside and not above:
                    return False
        elif kind == "blocked":
            hit = [st for sc, st in states.items() if matches(sc, args[1])]
            if not hit or any(st != BLOCKED for st in hit):
                return False
        elif kind == "updates":
            hit = [st for sc, st in states.items() if any(matches(sc, p) for p in args[1:])]
            if not hit or any(st != UPDATES for st in hit):
                return False
        else:
            raise ValueError(f"the oracle judges never/only/blocked/updates rules, not {rule!r}")
    return True


def under(scope: str, allowed: str) -> bool:
    """`scope` is `allowed`, matches it, or lies below a scope that does."""
    parts = scope.split("/")
    return any(matches("/".join(parts[: i + 1]), allowed) for i in range(len(parts)))


def _parse(rule: str) -> tuple[str, list[str], list[str]]:
    """(kind, [loss, scope, ...], the except_via patterns) of a rule text."""
    kind, _, rest = rule.strip().partition("(")
    body = rest.rstrip().removesuffix(")")
    body, _, via = body.partition(", except_via=")
    loss, _, scopes = body.partition(",")
    scopes = scopes.strip()
    if scopes.startswith("["):
        args = [s.strip() for s in scopes.strip("[]").split(",") if s.strip()]
    else:
        args = [scopes]
    avoid = [v.strip() for v in via.strip().strip("[]").split(",") if v.strip()]
    return kind.strip(), [loss.strip()] + args, avoid


# ----- drift, recomputed with numpy -------------------------------------------


@dataclasses.dataclass(frozen=True)
class DriftTruth:
    """One pair's drift and effective tau per target scope at one step."""

    drift: Mapping[str, float]
    tau: Mapping[str, float]


def drift_truth(
    pair: PairProbe,
    target_now: Sequence[np.ndarray],
    online_now: Sequence[np.ndarray],
    target_before: Sequence[np.ndarray] | None,
) -> DriftTruth:
    """drift = ||t - o|| / ||o||; tau = <t - tp, o - tp> / ||o - tp||^2 (NaN
    without the previous step's target), per target scope and roll-up. A
    non-trainable target variable (BatchNorm statistics) is a scope of its own
    under its layer, as the product's DRIFT rows have it; state is told by the
    online side (a TF1 target is often all trainable=False)."""
    names = list(pair.target)
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        state = not getattr(pair.online[i], "trainable", True)  # BatchNorm statistics
        parts = (name if state else leaf_scope(name)).split("/")
        for j in range(len(parts)):
            groups.setdefault("/".join(parts[: j + 1]), []).append(i)
    drift, tau = {}, {}
    for scope, members in groups.items():
        t = np.concatenate([np.ravel(target_now[i]).astype(np.float64) for i in members])
        o = np.concatenate([np.ravel(online_now[i]).astype(np.float64) for i in members])
        drift[scope] = float(np.linalg.norm(t - o) / np.linalg.norm(o))
        if target_before is None:
            tau[scope] = float("nan")
            continue
        tp = np.concatenate([np.ravel(target_before[i]).astype(np.float64) for i in members])
        gap2 = float(np.dot(o - tp, o - tp))
        tau[scope] = float(np.dot(t - tp, o - tp) / gap2) if gap2 > 0 else float("nan")
    return DriftTruth(drift=drift, tau=tau)
