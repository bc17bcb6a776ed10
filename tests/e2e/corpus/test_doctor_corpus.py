"""`tb-gradscope doctor` on every shape of the correctness corpus, without rules.

Each shape (tests/support/corpus/shapes_*.py) trains once per session with the oracle
watching (tests/support/corpus/harness.py), then `doctor --format json` reads its run:
a correct shape has no finding; a leaky mutant has a finding naming a loss
and scope of a rule the oracle says the mutant breaks, every rule a finding
proposes is false in the oracle on that mutant (copied into CI, it catches
the leak) and passes `check` on the mutant's correct twin (it survives the
fix). A mutant exits 1 when the oracle says a loss updates what a broken
rule forbids (a leak), else 0 with its findings as hazard notes (exit 1 under
--strict). Mutants that nothing a run records can tell from a correct
shape are listed in UNFINDABLE and expected to fail (strictly: if doctor
starts finding one, the mark must go). docs/CORRECTNESS.md shows the table.
"""

from __future__ import annotations

import importlib
import io
import json
import pathlib
import pkgutil
import re

import pytest

from tb_gradscope import rules as rules_lib
from tb_gradscope.commands import build_parser
from tests.support import corpus
from tests.support.corpus import harness, oracle
from tests.support.corpus.spec import Shape
from tests.unit.commands.test_doctor import _findings, _names_a_broken_rule

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
    "multihead_leaky": (
        "loss2's optimizer over every variable trains Agent/layer1 beside loss1's: the flow of the README's TF1 "
        "quickstart, where both var_lists take in layer1 by design (each loss also trains its own head); only "
        "never(loss2, Agent/layer1) says this one must not"
    ),
    "tf1_multihead_leaky": (
        "the flow of the README's TF1 quickstart (both var_lists take in Agent/layer1, each loss trains its own "
        "head): a design, not a leak, unless a rule says so"
    ),
}


def _all_shapes() -> list[Shape]:
    shapes: list[Shape] = []
    for module in sorted(m.name for m in pkgutil.iter_modules(corpus.__path__)):
        if module.startswith("shapes_"):
            shapes += importlib.import_module(f"tests.support.corpus.{module}").SHAPES
    return shapes


SHAPES = _all_shapes()
BY_NAME = {s.name: s for s in SHAPES}
CORRECT = [s for s in SHAPES if s.mutant_of is None]
MUTANTS = [s for s in SHAPES if s.mutant_of is not None]


def _mutant_params():
    out = []
    for s in MUTANTS:
        marks = (
            [pytest.mark.xfail(strict=True, reason=UNFINDABLE[s.name])]
            if s.name in UNFINDABLE
            else []
        )
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


def test_readme_counts_are_the_corpus_doctor_is_held_to():
    """The README's "silent on N correct loops, names K of M leaks" is this file's
    CORRECT, MUTANTS and UNFINDABLE (each counted test above holds it)."""
    readme = (pathlib.Path(__file__).resolve().parents[3] / "README.md").read_text()
    said = re.search(
        r"silent on the correctness corpus's (\d+) correct loops and names (\d+) of its\s+"
        r"(\d+) leaks \(\[why not the other (\w+)\]",
        readme,
    )
    assert said, "README no longer states doctor's corpus counts"
    words = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7}
    correct, found, mutants, missed = said.groups()
    assert (int(correct), int(found), int(mutants), words.get(missed)) == (
        len(CORRECT),
        len(MUTANTS) - len(UNFINDABLE),
        len(MUTANTS),
        len(UNFINDABLE),
    )


@pytest.mark.parametrize("shape", [pytest.param(s, id=s.name) for s in CORRECT])
def test_correct_shape_has_no_finding(shape, diagnosed):
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


@pytest.mark.parametrize("shape", _mutant_params())
def test_mutant_has_a_finding_naming_the_loss_and_scope_of_its_leak(shape, diagnosed):
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
    "shape", [pytest.param(s, id=s.name) for s in MUTANTS if s.name not in UNFINDABLE]
)
def test_every_rule_a_finding_proposes_is_false_in_the_oracle(shape, diagnosed):
    trained, _, found = diagnosed(shape)
    for f in found:
        if not f["rule"] or f["rule"].startswith("tracks"):
            continue
        judged = [oracle.rule_holds(f["rule"], truth) for truth in trained.truths.values()]
        assert False in judged, (
            f"{f['rule']} (from {f['kind']}) holds in the oracle at every step: {judged}"
        )


@pytest.mark.parametrize(
    "shape", [pytest.param(s, id=s.name) for s in MUTANTS if s.name not in UNFINDABLE]
)
def test_every_rule_a_finding_proposes_passes_check_on_the_fixed_twin(shape, diagnosed, tmp_path):
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


def _doctor_strict(trained):
    args = build_parser().parse_args(
        ["doctor", trained.logdir, "--run", trained.run, "--strict", "--format", "json"]
    )
    out, err = io.StringIO(), io.StringIO()
    return args.run(args, out, err), out.getvalue(), err.getvalue()


@pytest.mark.parametrize("shape", [pytest.param(s, id=s.name) for s in SHAPES])
def test_doctor_says_findings_are_partial_exactly_when_the_run_has_no_flowgraph(shape, diagnosed):
    trained = diagnosed(shape)[0]
    code, out, err = _doctor_strict(trained)
    (entry,) = json.loads(out)["runs"]
    assert entry["partial"] == (not shape.has_flowgraph)
    assert all(f["partial"] == (not shape.has_flowgraph) for f in entry["findings"])
    assert ("its findings are partial" in err and "rec.analyze" in err) == (
        not shape.has_flowgraph
    ), err[-1500:]


@pytest.mark.parametrize(
    "name, module",
    [
        ("eager_rollout_ac_analyzed", "shapes_doctor.py"),
        ("eager_rollout_replayed", "shapes_rollout.py"),
        ("eager_rollout_two_optimizers", "shapes_rollout.py"),
    ],
)
def test_rollout_tape_traced_by_rec_analyze_cuts_at_the_users_own_line(diagnosed, name, module):
    """The eager actor-critic's own code traced, not a copy of its loss:
    `eager_rollout_ac_analyzed` traces its episode function as written (the
    environment stepped through tf.numpy_function), `eager_rollout_replayed`
    and `eager_rollout_two_optimizers` their loss function of the stacked
    outputs (rec.analyze_losses, with one optimizer or one per loss). The
    advantage's stop_gradient is a blocked edge whose source line is in the
    shape's own file."""
    from tb_gradscope.read.logdir import load_logdir

    trained = diagnosed(BY_NAME[name])[0]
    (logs,) = load_logdir(trained.logdir, trained.run)
    edges = [
        e
        for e in logs.flowgraphs[-1][1].blocked_edges
        if e.loss == "actor" and e.op_type == "StopGradient"
    ]
    assert edges and all(
        e.source and e.source.file.endswith(f"tests/support/corpus/{module}") for e in edges
    ), edges


@pytest.mark.parametrize("name", ["td3_leaky", "gan_leaky", "fit_gan_leaky"])
def test_a_judge_finding_names_the_scope_whose_output_the_judge_reads(diagnosed, name):
    """`judge_trained` says the judge "reads the output of" a scope of the
    loss's own: the one with an edge straight into the judge (the actor's
    output layer), not a layer before it that reaches the judge only
    through it."""
    from tb_gradscope.read.flow import within
    from tb_gradscope.read.logdir import load_logdir

    trained, _, found = diagnosed(BY_NAME[name])
    (judged,) = [f for f in found if f["kind"] == "judge_trained"]
    (logs,) = load_logdir(trained.logdir, trained.run)
    source = judged["evidence"]["feeds_from"]
    into_judge = {e.src for e in logs.flowgraphs[-1][1].edges if within(e.dst, judged["scope"])}
    assert source in into_judge, (source, into_judge)
    assert f"reads the output of '{source}'" in judged["what"]


@pytest.mark.parametrize("shape", [pytest.param(s, id=s.name) for s in CORRECT if s.has_flowgraph])
def test_every_pin_rule_report_proposes_for_a_cut_passes_check_on_that_run(
    shape, diagnosed, tmp_path
):
    """`report`'s fix for each blocked edge pins the cut with a rule only when
    that rule holds on the run it is shown for (issue 57: SimSiam's
    `blocked(loss, encoder)` and a straight-through estimator's
    `blocked(recon, encoder)` failed `check`)."""
    from tb_gradscope.read.evidence import blocked_fix

    trained = diagnosed(shape)[0]
    edges = harness.ProductView(trained).report()["blocked_edges"]
    pins = sorted({m for e in edges for m in re.findall(r"blocked\([^()]*\)", blocked_fix(e))})
    if not pins:
        return
    rules_file = tmp_path / "rules.toml"
    rules_file.write_text(
        "rules = [" + ", ".join(json.dumps(r) for r in pins) + "]\n", encoding="utf-8"
    )
    args = build_parser().parse_args(
        ["check", trained.logdir, "--run", trained.run, "--rules", str(rules_file)]
    )
    out, err = io.StringIO(), io.StringIO()
    assert args.run(args, out, err) == 0, f"{pins}:\n{out.getvalue()}{err.getvalue()[-2000:]}"
