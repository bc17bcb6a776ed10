"""The corpus's TF2 shapes written as their users write them, under `@rec.watch`:
what the product concludes equals what the oracle computed, as for the explicit form.

A shape module may list such twins as `WATCHED` (same observer, same rules, the
step's own tape and optimizer); they are not corpus shapes of their own (the
corpus table counts the explicit forms).
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from tests.support import corpus
from tests.support.corpus import harness

pytestmark = pytest.mark.slow


def _watched():
    shapes = []
    for module in sorted(m.name for m in pkgutil.iter_modules(corpus.__path__)):
        if module.startswith("shapes_"):
            shapes += getattr(
                importlib.import_module(f"tests.support.corpus.{module}"), "WATCHED", []
            )
    return shapes


WATCHED = _watched()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("watched_corpus"))
    cache = {}

    def get(shape):
        if shape.name not in cache:
            done = harness.train(shape, root)
            cache[shape.name] = (done, harness.ProductView(done))
        return cache[shape.name]

    return get


def test_there_are_watched_twins_with_their_mutants():
    names = {s.name for s in WATCHED}
    assert len(WATCHED) >= 4
    assert all(s.mutant_of in names for s in WATCHED if s.mutant_of is not None)


@pytest.mark.parametrize("shape", WATCHED, ids=[s.name for s in WATCHED])
def test_watched_shape_agrees_with_the_oracle(shape, trained):
    done, view = trained(shape)
    assert sorted(done.truths) == list(shape.recorded_steps)
    # a FlowGraph exactly where the shape declares one (an eager step never traced has none)
    assert (view.report()["flowgraph"] is not None) == shape.has_flowgraph
    disagreements = (
        harness.matrix_disagreements(done, view)
        + harness.report_disagreements(done, view)
        + (harness.blocked_edge_disagreements(done, view) if shape.has_flowgraph else [])
        + (harness.path_cut_disagreements(done, view) if shape.has_flowgraph else [])
        + harness.drift_disagreements(done, view)
    )
    assert disagreements == [], "\n".join(str(d) for d in disagreements)
    broken = sorted(r for r, holds in harness.rules_verdict(done).items() if not holds)
    assert bool(broken) == (shape.mutant_of is not None)
    code, out, err = view.check()
    assert code == (1 if broken else 0), out + err
