"""What keeps a GraphRecorder's share of each run call small: memos of host work.

A training loop repeats a handful of run calls thousands of times, so what the
recorder works out about a call (which train ops its fetches run) and the
small calls it makes itself (snapshot, update table) are worked out once:

- `CalledOps` remembers, per fetch structure made of ops, tensors and names,
  which named train ops it runs (walking the structure costs more than the
  rest of an unrecorded call);
- `FixedCalls` runs a fixed fetch through `Session.make_callable`, made once
  per session (a third of `Session.run`'s host cost on small ops).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Mapping
from typing import Any

import tensorflow as tf

from tb_gradscope.integrations.tf1 import _graph as graphs

_MAX_FETCH_KEYS = 256  # fetch structures remembered (a loop uses a handful)


class CalledOps:
    """The named train ops a fetch structure runs, remembered per structure.

    Args:
      graph: the recorded graph.
      names: {train op: its name}.
    """

    def __init__(self, graph: tf.Graph, names: Mapping[tf.Operation, str]):
        self._graph = graph
        self._names = dict(names)
        self._known: dict[Any, frozenset[str]] = {}

    def __call__(self, fetches: Any) -> frozenset[str]:
        key = _fetch_key(fetches)
        called = self._known.get(key) if key is not None else None
        if called is None:
            named = self._names  # op.name is a C call: looked up once per op here
            called = frozenset(
                named[op] for op in graphs.fetched_ops(self._graph, fetches) if op in named
            )
            if key is not None and len(self._known) < _MAX_FETCH_KEYS:
                self._known[key] = called
        return called


class FixedCalls:
    """Runs fixed fetches through callables each session makes once."""

    def __init__(self) -> None:
        self._made: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()

    def run(self, run: Callable[..., Any], fetch: Any) -> Any:
        """`run(fetch)`, through `run`'s session's callable for `fetch` when it has one."""
        session = getattr(run, "__self__", None)
        if not hasattr(session, "make_callable"):
            return run(fetch)
        try:
            made = self._made.setdefault(session, {})
        except TypeError:  # a session that cannot be weakly referenced
            return run(fetch)
        call = made.get(fetch)
        if call is None:
            call = made[fetch] = session.make_callable(fetch)
        return call()


def _fetch_key(fetches: Any) -> Any:
    """A hashable key for a fetch structure made of ops, tensors and names
    (alone, or in a flat list or tuple), or None for anything else."""
    if isinstance(fetches, (tf.Operation, tf.Tensor, str)):
        return fetches
    if isinstance(fetches, (list, tuple)) and all(
        isinstance(item, (tf.Operation, tf.Tensor, str)) for item in fetches
    ):
        return (type(fetches), tuple(fetches))
    return None
