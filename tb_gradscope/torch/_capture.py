"""Forward dependence at a step that analyses: which parameters each tensor derives from, and where that is cut.

A `torch.overrides.TorchFunctionMode` sees every torch function and Tensor
method called while it is on (the recorder turns it on for one step, only
when the step analyses). For each result it keeps, per parameter the result
derives from, whether a gradient path is still open or where it was cut:

- `.detach()`, the `.data` getter and ops run under `torch.no_grad()` /
  `inference_mode()` -> `stop_gradient` (a region's cut names its `with`
  line, `_grad_mode_source`);
- argmax, comparisons, `.item()` (whose number may re-enter as a constant)
  -> `non_differentiable`; results of an integer or bool dtype -> `integer`;
- a parameter with `requires_grad=False` -> `tape_boundary` (autograd does not
  watch it, as a tape does not watch an unwatched TF variable).

Each cut keeps the op and the user's `file:line`. Tensors are held by weak
reference (numbers from `.item()` as themselves): the capture keeps nothing
alive. It also keeps which scopes feed which (the scope graph): a result made with a parameter of scope S
comes out of S. Parameters are never tracked as results (an in-place update
of a parameter under `no_grad` is the optimizer's or a target copy's).
The outputs differentiated by `torch.autograd.grad` stand for the losses of
gradients handed to `record_gradients` (`given_deps`), and the first op
that consumes a custom `autograd.Function`'s output names the user's line
that applied it (`custom_sources`). For per-path cuts each result also keeps
the scopes it comes out of by a gradient path (`open_origins`, and the
scope edges such paths take, `open_edges`), and every stop-gradient cut of
an open path on its way, with the scope the cut value came out of
(`path_cuts`): SimSiam's `.detach()` of an encoder output the loss also
reads through the predictor.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.overrides

from tb_gradscope.core.source import caller_source
from tb_gradscope.format.flowgraph import (
    CAUSE_INTEGER,
    CAUSE_NON_DIFFERENTIABLE,
    CAUSE_STOP_GRADIENT,
    CAUSE_TAPE_BOUNDARY,
    SourceLine,
)
from tb_gradscope.torch._grad_mode_source import grad_off_source

_DETACH = {"Tensor.detach", "Tensor.detach_", "torch.detach"}
_NON_DIFFERENTIABLE = {
    *(f"{p}.{n}" for p in ("torch", "Tensor") for n in ("argmax", "argmin", "argsort", "argwhere")),
    *(
        f"{p}.{n}"
        for p in ("torch", "Tensor")
        for n in ("eq", "ne", "lt", "le", "gt", "ge", "greater", "less", "isclose", "nonzero")
    ),
    *(f"Tensor.__{n}__" for n in ("eq", "ne", "lt", "le", "gt", "ge")),
}
_TO_NUMBER = {"Tensor.item", "Tensor.tolist", "Tensor.__float__", "Tensor.__int__"}
_DATA_GETTER = "Tensor.data.__get__"


@dataclasses.dataclass(frozen=True)
class PathCut:
    """Where a gradient path was cut: the cause, the op and the user's line."""

    cause: str
    op: str
    source: SourceLine | None


# Per parameter index: None (a gradient path is open) or the first PathCut on every path.
Deps = dict[int, "PathCut | None"]


@dataclasses.dataclass
class _Tracked:
    # A weak reference to the tensor (the capture never keeps a tensor alive),
    # or the number itself; either way `value()` is the object whose id keys it.
    value: Callable[[], Any]
    deps: Deps
    origins: frozenset[str]
    open_origins: frozenset[str] = frozenset()
    path_cuts: frozenset[tuple[PathCut, str]] = frozenset()


# How many recorders are computing their own statistics now: no capture
# observes a recorder's ops, its own or another recorder's in the process.
_RECORDERS_AT_WORK = [0]

# Prune the entries of dead tensors every this many new entries (a long
# rollout before the first backward must not grow the map without bound).
_PRUNE_EVERY = 4096


class Capture(torch.overrides.TorchFunctionMode):
    """The dataflow of one step, from parameters to every result derived from them.

    Args:
      param_index: id(parameter) -> its index in the recorder's parameters.
      param_scopes: the leaf scope of each parameter.
    """

    def __init__(self, param_index: Mapping[int, int], param_scopes: Sequence[str]):
        super().__init__()
        self._param_index = param_index
        self._param_scopes = param_scopes
        self._tracked: dict[int, _Tracked] = {}
        self.edges: Counter[tuple[str, str]] = Counter()
        self.open_edges: Counter[tuple[str, str]] = Counter()
        self.error: Exception | None = None
        self.custom_sources: dict[str, SourceLine | None] = {}
        # One entry per torch.autograd.grad call: (ids of the gradients it
        # returned, deps, origins of the outputs it differentiated).
        self._given: list[tuple[frozenset[int], Deps, frozenset[str]]] = []
        self._added = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.error is None and not _RECORDERS_AT_WORK[0]:
            try:
                if func is torch.autograd.grad:
                    self._differentiated(args[0] if args else kwargs.get("outputs"), out)
                    return out
                self._observe(func, args, kwargs, out)
            except Exception as e:  # noqa: BLE001 - observing must never break the step
                self.error = e
        return out

    def deps_of(self, value: Any) -> tuple[Deps, frozenset[str]] | None:
        """(deps, origin scopes) of a tensor seen in the step; None if never seen."""
        index = self._param_index.get(id(value))
        if index is not None:
            return {index: None}, frozenset({self._param_scopes[index]})
        entry = self._tracked.get(id(value))
        if entry is None or entry.value() is not value:
            return None
        return entry.deps, entry.origins

    def paths_of(self, value: Any) -> tuple[frozenset[str], frozenset[tuple[PathCut, str]]]:
        """(open origins, per-path cut candidates) of a tensor seen in the step."""
        index = self._param_index.get(id(value))
        if index is not None:
            return frozenset({self._param_scopes[index]}), frozenset()
        entry = self._tracked.get(id(value))
        if entry is None or entry.value() is not value:
            return frozenset(), frozenset()
        return entry.open_origins, entry.path_cuts

    def given_deps(
        self, grads: Sequence[torch.Tensor | None]
    ) -> tuple[Deps, frozenset[str]] | None:
        """(deps, origins) of what the `torch.autograd.grad` calls that returned
        any of `grads` differentiated (every call's, when none returned them:
        the user's own arithmetic made the gradients); None if it saw none."""
        ids = {id(g) for g in grads if g is not None}
        calls = [c for c in self._given if c[0] & ids] or self._given
        if not calls:
            return None
        deps: Deps = {}
        origins: frozenset[str] = frozenset()
        for _, call_deps, call_origins in calls:
            _merge(deps, call_deps)
            origins |= call_origins
        return deps, origins

    def forget_given(self) -> None:
        """Forgets the `torch.autograd.grad` calls seen so far (handed over)."""
        self._given = []

    @staticmethod
    def paused() -> contextlib.AbstractContextManager:
        """While a recorder computes its statistics: no capture observes its ops."""
        return _paused()

    def clear(self) -> None:
        """Forgets the step (releases the tensors held for it)."""
        self._tracked.clear()
        self.edges.clear()
        self.open_edges.clear()
        self.custom_sources.clear()
        self._given = []

    def _differentiated(self, outputs: Any, grads: Any) -> None:
        deps: Deps = {}
        origins: frozenset[str] = frozenset()
        for value in _leaves(outputs):
            seen = self.deps_of(value) if isinstance(value, torch.Tensor) else None
            if seen is None:
                continue
            _merge(deps, seen[0])
            origins |= seen[1]
        returned = frozenset(id(g) for g in _leaves(grads) if isinstance(g, torch.Tensor))
        self._given.append((returned, deps, origins))

    # ----- internals -------------------------------------------------------

    def _observe(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        deps: Deps = {}
        origins: set[str] = set()
        used: set[str] = set()
        open_in: set[str] = set()
        cuts_in: set[tuple[PathCut, str]] = set()
        name = _name(func)
        for value in _leaves((args, kwargs)):
            node = getattr(value, "grad_fn", None) if isinstance(value, torch.Tensor) else None
            if isinstance(node, torch.autograd.function.BackwardCFunction):
                self.custom_sources.setdefault(type(node).__name__, caller_source())
            index = self._param_index.get(id(value))
            if index is not None and isinstance(value, torch.Tensor):
                used.add(self._param_scopes[index])
                if value.requires_grad:
                    deps[index] = None
                elif index not in deps:
                    deps[index] = PathCut(
                        CAUSE_TAPE_BOUNDARY, "requires_grad=False", caller_source()
                    )
                continue
            entry = self._tracked.get(id(value))
            if entry is None or entry.value() is not value:
                continue
            origins |= entry.origins
            open_in |= entry.open_origins
            cuts_in |= entry.path_cuts
            for i, cut in entry.deps.items():
                if i not in deps or cut is None:  # an open path wins over a cut
                    deps[i] = cut
        if not deps:
            return
        for src in origins:
            for dst in used:
                if src != dst:
                    self.edges[(src, dst)] += 1
                    if src in open_in:
                        self.open_edges[(src, dst)] += 1
        out_origins = frozenset(used or origins)
        path_cuts = frozenset(cuts_in)
        out_open = frozenset(used or open_in)
        if name in _TO_NUMBER:
            cut = PathCut(CAUSE_NON_DIFFERENTIABLE, name, caller_source())
            for value in _leaves(out):
                if isinstance(value, (float, int)) and not isinstance(value, bool):
                    self._keep(value, _cut_open(deps, cut), out_origins)
            return
        for value in _leaves(out):
            if not isinstance(value, torch.Tensor) or id(value) in self._param_index:
                continue
            if value.requires_grad:  # open: out of the op's own scope, else of its open inputs
                self._keep(value, deps, out_origins, out_open, path_cuts)
                continue
            cut = _cut_for(name, value)
            cuts = path_cuts
            if cut.cause == CAUSE_STOP_GRADIENT and open_in:
                cuts = path_cuts | {(cut, src) for src in open_in}
            self._keep(value, _cut_open(deps, cut), out_origins, frozenset(), cuts)

    def _keep(
        self,
        value: Any,
        deps: Deps,
        origins: frozenset[str],
        open_origins: frozenset[str] = frozenset(),
        path_cuts: frozenset[tuple[PathCut, str]] = frozenset(),
    ) -> None:
        entry = self._tracked.get(id(value))
        if entry is not None and entry.value() is value:  # in place: paths add up
            merged = dict(entry.deps)
            for i, cut in deps.items():
                # An open path wins; of two cuts the first stays; a new dependence comes in.
                merged[i] = (
                    None if cut is None or merged.get(i, cut) is None else merged.get(i, cut)
                )
            entry.deps, entry.origins = merged, entry.origins | origins
            entry.open_origins |= open_origins
            entry.path_cuts |= path_cuts
            return
        ref = weakref.ref(value) if isinstance(value, torch.Tensor) else (lambda v=value: v)
        self._tracked[id(value)] = _Tracked(ref, deps, origins, open_origins, path_cuts)
        self._added += 1
        if self._added % _PRUNE_EVERY == 0:
            self._tracked = {k: e for k, e in self._tracked.items() if e.value() is not None}


@contextlib.contextmanager
def _paused() -> Iterator[None]:
    _RECORDERS_AT_WORK[0] += 1
    try:
        yield
    finally:
        _RECORDERS_AT_WORK[0] -= 1


def _cut_open(deps: Deps, cut: PathCut) -> Deps:
    """Every open path of `deps` cut by `cut`; paths already cut keep their first cut."""
    return {i: cut if old is None else old for i, old in deps.items()}


def _cut_for(name: str, value: torch.Tensor) -> PathCut:
    """Why a result that derives from parameters has no gradient path."""
    if name in _DETACH or name == _DATA_GETTER:
        cause, op = CAUSE_STOP_GRADIENT, "Tensor.data" if name == _DATA_GETTER else name
    elif torch.is_inference_mode_enabled():
        op = f"inference_mode: {name}"
        return PathCut(CAUSE_STOP_GRADIENT, op, grad_off_source() or caller_source())
    elif not torch.is_grad_enabled():
        op = f"no_grad: {name}"
        return PathCut(CAUSE_STOP_GRADIENT, op, grad_off_source() or caller_source())
    elif name in _NON_DIFFERENTIABLE:
        cause, op = CAUSE_NON_DIFFERENTIABLE, name
    elif not (value.is_floating_point() or value.is_complex()):
        cause, op = CAUSE_INTEGER, name
    else:
        cause, op = CAUSE_NON_DIFFERENTIABLE, name
    return PathCut(cause, op, caller_source())


def _name(func: Any) -> str:
    """`Tensor.detach`, `torch.argmax`, `torch.nn.functional.linear`: the name users write."""
    try:
        name = torch.overrides.resolve_name(func) or getattr(func, "__name__", str(func))
    except Exception:  # noqa: BLE001 - a name is only for the report
        name = getattr(func, "__name__", str(func))
    return name.removeprefix("torch.") if name.startswith("torch.Tensor.") else name


def _leaves(tree: Any) -> Iterator[Any]:
    """The non-container values of nested tuples, lists and dicts."""
    if isinstance(tree, (tuple, list)):
        for item in tree:
            yield from _leaves(item)
    elif isinstance(tree, dict):
        for item in tree.values():
            yield from _leaves(item)
    else:
        yield tree


def _merge(into: Deps, deps: Deps) -> None:
    """Adds `deps` to `into`, an open path (None) winning over a cut."""
    for i, cut in deps.items():
        if i not in into or cut is None:
            into[i] = cut
