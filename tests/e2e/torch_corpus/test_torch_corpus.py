"""The PyTorch recorder against the brute-force oracle on every shape of the torch corpus.

Each shape (tests/support/torch_corpus/shapes_*.py) trains once per session with
`tb_gradscope.torch.Recorder` recording and the oracle
(tests/support/torch_corpus/oracle.py: autograd, perturbations, optimizer
steps; nothing of tb_gradscope) watching every recorded step. Then, per shape,
read back as a user reads a run: every matrix cell's flow state at every
recorded step, from the plugin route and from `report --format json`, equals
the oracle's; `check` passes exactly when the oracle says the shape's rules
hold (so every mutant's leak fails it); blocked edges name every producer
scope a cut separates, with the PyTorch call that cut and the shape's own
source line; drift and effective tau equal a numpy recomputation.
"""

from __future__ import annotations

import pytest

from tests.support.torch_corpus import harness
from tests.support.torch_corpus.spec import Shape

pytestmark = pytest.mark.slow

SHAPES = harness.all_shapes()
BY_NAME = {s.name: s for s in SHAPES}


def _params(test: str, shapes=SHAPES):
    """One param per shape; a strict xfail where the shape says `test` breaks."""
    out = []
    for s in shapes:
        marks = [pytest.mark.xfail(reason=s.xfail, strict=True)] if test in s.xfail_tests else []
        out.append(pytest.param(s, id=s.name, marks=marks))
    return out


def _fail_on(disagreements, what: str) -> None:
    if disagreements:
        listed = "\n  ".join(str(d) for d in disagreements)
        pytest.fail(f"{len(disagreements)} {what} disagree with the oracle:\n  {listed}")


def test_corpus_has_the_shapes_and_mutants_the_issue_asks_for():
    assert len({s.name for s in SHAPES}) == len(SHAPES), "shape names must be unique"
    correct = [s for s in SHAPES if s.mutant_of is None]
    mutants = [s for s in SHAPES if s.mutant_of is not None]
    assert len(correct) >= 20, [s.name for s in correct]
    assert len(mutants) >= 10, [s.name for s in mutants]
    for m in mutants:
        assert m.mutant_of in BY_NAME, f"mutant {m.name} breaks unknown shape {m.mutant_of}"
        assert BY_NAME[m.mutant_of].rules == m.rules, f"mutant {m.name} must keep its shape's rules"


@pytest.mark.parametrize(
    "shape", _params("test_matrix_route_states_equal_the_oracle_at_every_recorded_step")
)
def test_matrix_route_states_equal_the_oracle_at_every_recorded_step(
    shape: Shape, trained_torch_shapes
):
    trained, view = trained_torch_shapes(shape)
    assert sorted(trained.truths) == list(shape.recorded_steps)
    _fail_on(harness.matrix_disagreements(trained, view), "matrix cells")


@pytest.mark.parametrize(
    "shape", _params("test_report_json_states_equal_the_oracle_at_every_recorded_step")
)
def test_report_json_states_equal_the_oracle_at_every_recorded_step(
    shape: Shape, trained_torch_shapes
):
    trained, view = trained_torch_shapes(shape)
    _fail_on(harness.report_disagreements(trained, view), "report cells")


@pytest.mark.parametrize("shape", _params("test_flowgraph_says_pytorch_traced_it"))
def test_flowgraph_says_pytorch_traced_it(shape: Shape, trained_torch_shapes):
    _, view = trained_torch_shapes(shape)
    flowgraph = view.route("flowgraph")["flowgraph"]
    assert flowgraph is not None and flowgraph["source"] == "torch", flowgraph and flowgraph.get(
        "source"
    )


@pytest.mark.parametrize(
    "shape", _params("test_check_passes_exactly_when_the_oracle_says_the_rules_hold")
)
def test_check_passes_exactly_when_the_oracle_says_the_rules_hold(
    shape: Shape, trained_torch_shapes
):
    trained, view = trained_torch_shapes(shape)
    verdict = harness.rules_verdict(trained)
    code, out, err = view.check()
    broken = sorted(r for r, holds in verdict.items() if not holds)
    if shape.mutant_of is not None:
        assert broken, f"the oracle finds no leak in mutant {shape.name}: the mutant is wrong"
    want = 1 if broken else 0
    assert code == want, (
        f"check exited {code}, the oracle expects {want} (rules broken in the oracle: {broken})\n"
        f"stdout:\n{out}\nstderr:\n{err}"
    )
    for rule in broken:
        assert rule.replace(" ", "") in out.replace(" ", ""), (
            f"check did not name the broken rule {rule}:\n{out}"
        )


@pytest.mark.parametrize(
    "shape",
    _params("test_mutant_violation_advice_names_the_right_fix", [s for s in SHAPES if s.advice]),
)
def test_mutant_violation_advice_names_the_right_fix(shape: Shape, trained_torch_shapes):
    _, view = trained_torch_shapes(shape)
    code, out, _ = view.check()
    assert code == 1, f"check exited {code} on mutant {shape.name}"
    missing = [word for word in shape.advice if word.lower() not in out.lower()]
    assert not missing, f"the advice never names {missing} (the leak's fix):\n{out}"


@pytest.mark.parametrize("shape", _params("test_recorder_wrote_the_shape_rules_into_the_log"))
def test_recorder_wrote_the_shape_rules_into_the_log(shape: Shape, trained_torch_shapes):
    _, view = trained_torch_shapes(shape)
    recorded = {r.replace(" ", "") for r in view.report()["rules"]}
    missing = [r for r in shape.rules if r.replace(" ", "") not in recorded]
    assert not missing, f"rules given to the recorder but absent from the log: {missing}"


@pytest.mark.parametrize(
    "shape", _params("test_blocked_edges_name_every_producer_scope_the_cut_separates")
)
def test_blocked_edges_name_every_producer_scope_the_cut_separates(
    shape: Shape, trained_torch_shapes
):
    trained, view = trained_torch_shapes(shape)
    _fail_on(harness.blocked_edge_disagreements(trained, view), "blocked producers")


@pytest.mark.parametrize(
    "shape", _params("test_blocked_edges_name_the_pytorch_call_and_the_users_line")
)
def test_blocked_edges_name_the_pytorch_call_and_the_users_line(shape: Shape, trained_torch_shapes):
    trained, view = trained_torch_shapes(shape)
    _fail_on(harness.cut_origin_disagreements(trained, view), "blocked edges' origins")


@pytest.mark.parametrize(
    "shape", _params("test_per_path_cuts_are_blocked_edges_where_the_oracle_finds_them")
)
def test_per_path_cuts_are_blocked_edges_where_the_oracle_finds_them(
    shape: Shape, trained_torch_shapes
):
    trained, view = trained_torch_shapes(shape)
    _fail_on(harness.path_cut_disagreements(trained, view), "per-path cuts")


@pytest.mark.parametrize("shape", _params("test_drift_and_effective_tau_equal_numpy"))
def test_drift_and_effective_tau_equal_numpy(shape: Shape, trained_torch_shapes):
    trained, view = trained_torch_shapes(shape)
    if not trained.drifts:
        assert not view.report()["drift"], "the product recorded drift for a shape without pairs"
        return
    _fail_on(harness.drift_disagreements(trained, view), "drift values")
