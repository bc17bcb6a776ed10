"""`tb-gradscope doctor` on every shape of the PyTorch corpus, without rules.

The same judgement as the TF corpus's (tests/e2e/corpus/test_doctor_corpus.py), on
the PyTorch runs of the shared session training (`trained_torch_shapes`): a
correct shape has no finding and exits 0; a leaky mutant has a finding naming
a loss and scope of a rule the oracle says it breaks, exits 1 exactly when the
oracle says a loss updates what a broken rule forbids (else its findings are
hazards, exit 1 under --strict); every rule a finding proposes is false in the
oracle on the mutant and passes `check` on the correct twin. Mutants that
nothing a run records can tell from a correct shape are in UNFINDABLE, strict
xfails: the TF corpus's own exceptions, translated.
"""

from __future__ import annotations

import io
import json

import pytest

from tb_gradscope import rules as rules_lib
from tb_gradscope.commands import build_parser
from tests.support.corpus import oracle
from tests.support.torch_corpus import harness
from tests.support.torch_corpus.spec import Shape
from tests.unit.commands.test_doctor import _findings, _names_a_broken_rule

pytestmark = pytest.mark.slow

UNFINDABLE = {
    "multihead_leaky": (
        "as TF's multihead_leaky: loss2's optimizer over every parameter trains Agent/layer1 beside "
        "loss1's, the flow of seed 01's own var_lists (both take in layer1 by design); only "
        "never(loss2, Agent/layer1) says this one must not"
    ),
    "frozen_leaky": (
        "a forgotten requires_grad_(False) leaves a net trained whole by its one loss and one "
        "optimizer, the flow of any plain fine-tuning run; only never(fit, net/l1) says l1 must not"
    ),
}

SHAPES = harness.all_shapes()
BY_NAME = {s.name: s for s in SHAPES}
CORRECT = [s for s in SHAPES if s.mutant_of is None]
MUTANTS = [s for s in SHAPES if s.mutant_of is not None]
FINDABLE = [s for s in MUTANTS if s.name not in UNFINDABLE]
MUTANT_TEST = "test_mutant_has_a_finding_naming_the_loss_and_scope_of_its_leak"


def _params(test: str, shapes) -> list:
    """One param per shape; a strict xfail where the shape says `test` breaks
    on a product bug, or where the mutant is UNFINDABLE."""
    out = []
    for s in shapes:
        reason = UNFINDABLE.get(s.name) if test == MUTANT_TEST else None
        reason = reason or (s.xfail if test in s.xfail_tests else None)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        out.append(pytest.param(s, id=s.name, marks=marks))
    return out


@pytest.fixture(scope="session")
def diagnosed(trained_torch_shapes):
    """Shape -> (TrainedShape, doctor's exit status, findings), on the corpus's
    shared training (one per shape per session)."""
    cache: dict[str, tuple] = {}

    def get(shape: Shape):
        if shape.name not in cache:
            trained = trained_torch_shapes(shape)[0]
            code, found, _ = _findings(trained.logdir, trained.run)
            cache[shape.name] = (trained, code, found)
        return cache[shape.name]

    return get


def test_unfindable_mutants_are_mutants_of_the_corpus():
    assert set(UNFINDABLE) <= {s.name for s in MUTANTS}


@pytest.mark.parametrize("shape", _params("test_correct_shape_has_no_finding", CORRECT))
def test_correct_shape_has_no_finding(shape: Shape, diagnosed):
    _, code, found = diagnosed(shape)
    assert found == [] and code == 0, [(f["kind"], f["loss"], f["scope"], f["what"]) for f in found]


def _leaks(trained, broken) -> bool:
    """Whether the oracle says a loss updates a scope a broken rule forbids
    (a leak), at some recorded step, rather than only being reached (a hazard)."""
    for truth in trained.truths.values():
        for rule in broken:
            if isinstance(rule, rules_lib.Blocked):
                continue
            if oracle.rule_holds(str(rule), truth) is False:
                return True
    return False


def _doctor_strict(trained):
    args = build_parser().parse_args(
        ["doctor", trained.logdir, "--run", trained.run, "--strict", "--format", "json"]
    )
    out, err = io.StringIO(), io.StringIO()
    return args.run(args, out, err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("shape", _params(MUTANT_TEST, MUTANTS))
def test_mutant_has_a_finding_naming_the_loss_and_scope_of_its_leak(shape: Shape, diagnosed):
    trained, code, found = diagnosed(shape)
    broken = [
        rules_lib.parse_rule(r) for r, holds in harness.rules_verdict(trained).items() if not holds
    ]
    assert broken, f"the oracle finds no broken rule in {shape.name}"
    assert any(_names_a_broken_rule(f, broken) for f in found), (
        f"no finding names a loss and scope of {[str(r) for r in broken]}: "
        f"{[(f['kind'], f['loss'], f['scope']) for f in found]}"
    )
    leak = _leaks(trained, broken)
    assert code == (1 if leak else 0), [
        (f["kind"], f["severity"], f["loss"], f["scope"]) for f in found
    ]
    assert any(f["severity"] == "leak" for f in found) == leak
    if not leak:
        strict, _, _ = _doctor_strict(trained)
        assert strict == 1, "--strict fails on hazards"


@pytest.mark.parametrize(
    "shape", _params("test_every_rule_a_finding_proposes_is_false_in_the_oracle", FINDABLE)
)
def test_every_rule_a_finding_proposes_is_false_in_the_oracle(shape: Shape, diagnosed):
    trained, _, found = diagnosed(shape)
    for f in found:
        if not f["rule"] or f["rule"].startswith("tracks"):
            continue
        judged = [oracle.rule_holds(f["rule"], truth) for truth in trained.truths.values()]
        assert False in judged, (
            f"{f['rule']} (from {f['kind']}) holds in the oracle at every step: {judged}"
        )


@pytest.mark.parametrize(
    "shape", _params("test_every_rule_a_finding_proposes_passes_check_on_the_fixed_twin", FINDABLE)
)
def test_every_rule_a_finding_proposes_passes_check_on_the_fixed_twin(
    shape: Shape, diagnosed, tmp_path
):
    _, _, found = diagnosed(shape)
    proposed = sorted({f["rule"] for f in found if f["rule"]})
    assert proposed, f"{shape.name}: no finding proposes a rule"
    twin = diagnosed(BY_NAME[shape.mutant_of])[0]
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text(
        "rules = [" + ", ".join(json.dumps(r) for r in proposed) + "]\n", encoding="utf-8"
    )
    args = build_parser().parse_args(
        ["check", twin.logdir, "--run", twin.run, "--rules", str(rules_file)]
    )
    out, err = io.StringIO(), io.StringIO()
    assert args.run(args, out, err) == 0, (
        f"{proposed} on {twin.run}:\n{out.getvalue()}{err.getvalue()[-2000:]}"
    )


@pytest.mark.parametrize("shape", [pytest.param(s, id=s.name) for s in SHAPES])
def test_doctor_reads_every_torch_run_as_complete(shape: Shape, diagnosed):
    """A PyTorch run always has its FlowGraph: doctor's findings are never partial."""
    trained = diagnosed(shape)[0]
    code, out, err = _doctor_strict(trained)
    (entry,) = json.loads(out)["runs"]
    assert entry["partial"] is False
    assert all(f["partial"] is False for f in entry["findings"])
    assert "its findings are partial" not in err, err[-1500:]
