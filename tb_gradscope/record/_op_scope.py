"""The name scope of the ops the recorder adds to a user's graph.

Every kernel builds its ops under `tb_gradscope/<part>/` (`grad_stats`,
`update_stats`, `drift`, `rules`, `write`, `step`): TensorBoard's Graphs tab
shows the recorder's share of a step as one node apart from the user's model,
and `bench.bench_ops` counts what each part adds. A kernel called from inside
another one (or from the TF1 integration's own `tb_gradscope/...` scopes)
keeps the scope it is in. Names only: no op is added or changed. The
functions a record passes on its way to the event file (the drift monitor's
`record`, the sink's writes) open `part` in their body instead of taking the
`kernel` decorator, so that no wrapper of this module sits on the write path
(the drift monitor's `record` still opts out of autograph by TF's own decorator).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import tensorflow as tf

OP_SCOPE = "tb_gradscope"

_F = TypeVar("_F", bound=Callable[..., Any])


@contextlib.contextmanager
def part(name: str) -> Iterator[None]:
    """Ops built inside go under `tb_gradscope/<name>/`, unless already under `tb_gradscope/`."""
    current = tf.compat.v1.get_default_graph().get_name_scope()
    if current == OP_SCOPE or current.startswith(OP_SCOPE + "/"):
        yield
        return
    with tf.name_scope(f"{OP_SCOPE}/{name}/"):
        yield


def kernel(name: str) -> Callable[[_F], _F]:
    """Decorator: the function builds its ops in `part(name)`, without autograph
    (the kernels build their own control flow; converting them when a user's
    `tf.function` calls them would only cost trace time)."""

    def decorate(fn: _F) -> _F:
        @functools.wraps(fn)
        def scoped(*args: Any, **kwargs: Any) -> Any:
            with part(name):
                return fn(*args, **kwargs)

        return tf.autograph.experimental.do_not_convert(scoped)  # type: ignore[return-value]

    return decorate
