"""`tb-gradscope doctor` on every shape of the correctness corpus, without rules.

Each shape (tests/corpus/shapes_*.py) trains once per session with the oracle
watching (tests/corpus/harness.py), then `doctor --format json` reads its run:
a correct shape has no finding; a leaky mutant has a finding naming a loss
and scope of a rule the oracle says the mutant breaks, and every rule a
finding proposes is false in the oracle on that mutant (copied into CI, it
catches the leak). Mutants that nothing a run records can tell from a correct
shape are listed in UNFINDABLE and expected to fail (strictly: if doctor
starts finding one, the mark must go). docs/CORRECTNESS.md shows the table.
"""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from tb_gradscope import rules as rules_lib
from tests import corpus
from tests.corpus import harness, oracle
from tests.corpus.spec import Shape
from tests.test_doctor import _findings, _names_a_broken_rule

pytestmark = pytest.mark.slow

UNFINDABLE = {
    "fit_multi_output_leaky": (
        "aux training agent/trunk is the flow of actor_critic's correct shared trunk (two heads, one optimizer, "
        "both losses update the trunk) with gradients of the same size (aux 0.42-0.51, q 0.52-0.65); fit records "
        "no conflict, and loss weights say how much a loss counts, not whether it may train the trunk: auxiliary "
        "losses are often meant to; only never(aux, agent/trunk) says this one is not"
    ),
    "subclassed_leaky": (
        "aux training net/encoder is the flow of actor_critic's correct shared trunk, and the two losses' cosines "
        "there are mixed (-0.26, 0.01, -0.50, 0.23), not fighting: nothing recorded says aux must only read it"
    ),
    "simsiam_leaky": (
        "a symmetric loss training the encoder by both paths is the flow of SimCLR-style contrastive learning, "
        "which is correct there; only the correct run's per-path cut, or blocked(simsiam, encoder/*, "
        "except_via=predictor), says this loss's direct path must be cut"
    ),
}


def _all_shapes() -> list[Shape]:
    shapes: list[Shape] = []
    for module in sorted(m.name for m in pkgutil.iter_modules(corpus.__path__)):
        if module.startswith("shapes_"):
            shapes += importlib.import_module(f"tests.corpus.{module}").SHAPES
    return shapes


SHAPES = _all_shapes()
CORRECT = [s for s in SHAPES if s.mutant_of is None]
MUTANTS = [s for s in SHAPES if s.mutant_of is not None]


def _mutant_params():
    out = []
    for s in MUTANTS:
        marks = [pytest.mark.xfail(strict=True, reason=UNFINDABLE[s.name])] if s.name in UNFINDABLE else []
        out.append(pytest.param(s, id=s.name, marks=marks))
    return out


@pytest.fixture(scope="session")
def diagnosed(trained_shapes):
    """Shape -> (TrainedShape, doctor's exit status, findings), on the corpus's
    shared training (one per shape per session)."""
    cache: dict[str, tuple] = {}

    def get(shape: Shape):
        if shape.name not in cache:
            trained = trained_shapes(shape)[0]
            code, found, _ = _findings(trained.logdir, trained.run)
            cache[shape.name] = (trained, code, found)
        return cache[shape.name]

    return get


def test_unfindable_mutants_are_mutants_of_the_corpus():
    assert set(UNFINDABLE) <= {s.name for s in MUTANTS}


@pytest.mark.parametrize("shape", [pytest.param(s, id=s.name) for s in CORRECT])
def test_correct_shape_has_no_finding(shape, diagnosed):
    _, code, found = diagnosed(shape)
    assert found == [] and code == 0, [(f["kind"], f["loss"], f["scope"], f["what"]) for f in found]


@pytest.mark.parametrize("shape", _mutant_params())
def test_mutant_has_a_finding_naming_the_loss_and_scope_of_its_leak(shape, diagnosed):
    trained, code, found = diagnosed(shape)
    broken = [rules_lib.parse_rule(r) for r, holds in harness.rules_verdict(trained).items() if not holds]
    assert broken, f"the oracle finds no broken rule in {shape.name}"
    assert code == 1 and any(_names_a_broken_rule(f, broken) for f in found), (
        f"no finding names a loss and scope of {[str(r) for r in broken]}: "
        f"{[(f['kind'], f['loss'], f['scope']) for f in found]}"
    )


@pytest.mark.parametrize("shape", [pytest.param(s, id=s.name) for s in MUTANTS if s.name not in UNFINDABLE])
def test_every_rule_a_finding_proposes_is_false_in_the_oracle(shape, diagnosed):
    trained, _, found = diagnosed(shape)
    for f in found:
        if not f["rule"] or f["rule"].startswith("tracks"):
            continue
        judged = [oracle.rule_holds(f["rule"], truth) for truth in trained.truths.values()]
        assert False in judged, f"{f['rule']} (from {f['kind']}) holds in the oracle at every step: {judged}"
