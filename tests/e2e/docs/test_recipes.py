"""docs/RECIPES.md: every recipe runs and its report shows its shape's truth.

Each script under docs/recipes/ is a user's training loop plus a few lines
marked `# gradscope`. The scripts run in this process (runpy, a tmp logdir as
argv[1]); the logs they leave are read back as `tb-gradscope report` and
`check` read them: every loss recorded at the same steps, the flow states the
shape must show, ||delta theta|| > 0 for every trained network, the recipe's
rules recorded and unbroken, and no warning from tb_gradscope.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import pathlib
import re
import runpy
import sys
import tokenize
import warnings
from typing import Any
from unittest import mock

import pytest

from tb_gradscope import format as fmt
from tb_gradscope.commands import build_parser
from tb_gradscope.read.flowstate import NO_GRADIENT
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.runs import RunLogs
from tb_gradscope.read.summary import run_summary

RECIPES = pathlib.Path(__file__).resolve().parents[3] / "docs" / "recipes"
DOC = RECIPES.parent / "RECIPES.md"
DOC_BLOCK = re.compile(r"<!-- recipe: (\w+) -->\n```python\n(.*?)\n```", re.S)
MARK = "# gradscope"
MAX_LOOP_LINES = 4  # statements added to or changed in the user's step and loop
RECORDED_STEPS = [0, 10, 20]  # 30 steps, every_n_steps=10
GRADSCOPE_NAMES = {"rec", "gs", "Recorder", "GraphRecorder", "pairs", "pair_scopes", "tb_gradscope"}
UPD, IGN, BLK, IND = fmt.UPDATES, fmt.IGNORED, fmt.BLOCKED, fmt.INDEPENDENT
STOP, TAPE = "stop_gradient", "tape_boundary"


@dataclasses.dataclass(frozen=True)
class Truth:
    """What a recipe's run must show.

    Attributes:
      cells: {(loss, scope): flow state} at the last recorded step.
      trained: scopes an optimizer moves (||delta theta|| > 0 at recorded steps).
      cuts: (loss, scope, cause) of blocked edges the report must list: a cut
        whose producer is `scope` or below it; a `stop_gradient` cut names the
        recipe's own `tf.stop_gradient` line.
      drift: target/online pairs whose drift is recorded.
    """

    cells: dict[tuple[str, str], str]
    trained: tuple[str, ...]
    cuts: tuple[tuple[str, str, str], ...] = ()
    drift: tuple[str, ...] = ()

    @property
    def losses(self) -> list[str]:
        return sorted({loss for loss, _ in self.cells})


TRUTHS = {
    "ddpg": Truth(
        {
            ("critic", "critic"): UPD,
            ("critic", "actor"): IND,
            ("critic", "target_actor"): BLK,
            ("critic", "target_critic"): BLK,
            ("actor", "actor"): UPD,
            ("actor", "critic"): IGN,
            ("actor", "target_actor"): IND,
            ("actor", "target_critic"): IND,
        },
        trained=("actor", "critic"),
        cuts=(("critic", "target_actor", TAPE), ("critic", "target_critic", TAPE)),
    ),
    "td3": Truth(
        {
            ("critic", "critic1"): UPD,
            ("critic", "critic2"): UPD,
            ("critic", "actor"): IND,
            ("critic", "target_actor"): BLK,
            ("critic", "target_critic1"): BLK,
            ("critic", "target_critic2"): BLK,
            ("actor", "actor"): UPD,
            ("actor", "critic1"): IGN,
            ("actor", "critic2"): IND,
        },
        trained=("actor", "critic1", "critic2"),
        cuts=(("critic", "target_critic1", STOP), ("critic", "target_critic2", STOP)),
    ),
    "sac": Truth(
        {
            ("q", "q1"): UPD,
            ("q", "q2"): UPD,
            ("q", "target_q1"): BLK,
            ("q", "target_q2"): BLK,
            ("q", "pi"): BLK,
            ("q", "log_alpha"): BLK,
            ("pi", "pi"): UPD,
            ("pi", "q1"): IGN,
            ("pi", "q2"): IGN,
            ("pi", "log_alpha"): IGN,
            ("pi", "target_q1"): IND,
            ("alpha", "log_alpha"): UPD,
            ("alpha", "pi"): BLK,
            ("alpha", "q1"): IND,
        },
        trained=("pi", "q1", "q2", "log_alpha"),
        cuts=(("q", "target_q1", STOP), ("q", "pi", STOP), ("alpha", "pi", TAPE)),
    ),
    "gan": Truth(
        {
            ("g_loss", "generator"): UPD,
            ("g_loss", "discriminator"): IGN,
            ("d_loss", "discriminator"): UPD,
            ("d_loss", "generator"): IGN,
        },
        trained=("generator", "discriminator"),
    ),
    "byol": Truth(
        {("byol", "online"): UPD, ("byol", "predictor"): UPD, ("byol", "target"): BLK},
        trained=("online", "predictor"),
        cuts=(("byol", "target", TAPE),),
        drift=("target<-online",),
    ),
    "byol_split": Truth(
        {
            ("byol", "encoder"): UPD,
            ("byol", "projector"): UPD,
            ("byol", "predictor"): UPD,
            ("byol", "target_encoder"): BLK,
            ("byol", "target_projector"): BLK,
        },
        trained=("encoder", "projector", "predictor"),
        cuts=(("byol", "target_encoder", TAPE), ("byol", "target_projector", TAPE)),
    ),
    "actor_critic": Truth(
        {
            ("actor", "ac/trunk"): UPD,
            ("actor", "ac/policy_head"): UPD,
            ("actor", "ac/value_head"): BLK,
            ("critic", "ac/trunk"): UPD,
            ("critic", "ac/value_head"): UPD,
            ("critic", "ac/policy_head"): IND,
        },
        trained=("ac/trunk", "ac/policy_head", "ac/value_head"),
        cuts=(("actor", "ac/value_head", STOP),),
    ),
    "a2c": Truth(
        {
            ("actor", "ac/trunk"): UPD,
            ("actor", "ac/policy_head"): UPD,
            ("actor", "ac/value_head"): BLK,
            ("critic", "ac/trunk"): UPD,
            ("critic", "ac/value_head"): UPD,
            ("critic", "ac/policy_head"): IND,
        },
        trained=("ac/trunk", "ac/policy_head", "ac/value_head"),
        cuts=(("actor", "ac/value_head", STOP),),
    ),
    "eager": Truth(
        {("td", "online"): UPD, ("td", "target"): BLK},
        trained=("online",),
        cuts=(("td", "target", TAPE),),
    ),
    "tf1_ddpg": Truth(
        {
            ("critic", "Critic/eval"): UPD,
            ("critic", "Critic/target"): BLK,
            ("critic", "Actor/target"): BLK,
            ("critic", "Actor/eval"): IND,
            ("actor", "Actor/eval"): UPD,
            ("actor", "Critic/eval"): IGN,
            ("actor", "Critic/target"): IND,
        },
        trained=("Actor/eval", "Critic/eval"),
        cuts=(("critic", "Critic/target", STOP),),
        drift=("Actor/target<-Actor/eval", "Critic/target<-Critic/eval"),
    ),
}


# ----- the lines a recipe adds ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Added:
    """The statements a recipe marks `# gradscope`, split into setup (imports,
    building the recorder) and the lines in the user's step and loop."""

    setup: list[str]
    loop: list[str]
    unmarked_uses: list[int]  # lines using gradscope outside every marked statement


def _header_end(node: ast.stmt) -> int:
    """Last line of a statement's own text (a compound statement's header)."""
    body = getattr(node, "body", None)
    if isinstance(body, list) and body and isinstance(node, ast.stmt):
        return body[0].lineno - 1
    return node.end_lineno


def added_lines(source: str) -> Added:
    tree = ast.parse(source)
    marked = {
        tok.start[0]
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT and tok.string.startswith(MARK)
    }
    statements = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    chosen: dict[int, ast.stmt] = {}
    for line in marked:
        holders = [n for n in statements if n.lineno <= line <= _header_end(n)]
        node = min(holders, key=lambda n: _header_end(n) - n.lineno)
        chosen[id(node)] = node
    spans = [(n.lineno, _header_end(n)) for n in chosen.values()]
    uses = sorted(
        {
            n.lineno
            for n in ast.walk(tree)
            if (isinstance(n, ast.Name) and n.id in GRADSCOPE_NAMES)
            or (isinstance(n, (ast.Import, ast.ImportFrom)) and "tb_gradscope" in ast.unparse(n))
        }
    )
    lines = source.splitlines()
    setup, loop = [], []
    for node in sorted(chosen.values(), key=lambda n: n.lineno):
        text = lines[node.lineno - 1].strip()
        (setup if _is_setup(node) else loop).append(text)
    return Added(setup, loop, [u for u in uses if not any(a <= u <= b for a, b in spans)])


def _is_setup(node: ast.stmt) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return True
    call = getattr(node, "value", None)
    return (
        isinstance(node, ast.Assign)
        and isinstance(call, ast.Call)
        and getattr(call.func, "id", None) in ("Recorder", "GraphRecorder")
    )


def _recipe_source(name: str) -> str:
    return (RECIPES / f"{name}.py").read_text(encoding="utf-8")


def test_every_recipe_has_its_truth_and_every_truth_its_recipe():
    assert sorted(p.stem for p in RECIPES.glob("*.py")) == sorted(TRUTHS)


@pytest.mark.parametrize("name", sorted(TRUTHS))
def test_recipe_adds_at_most_four_lines_to_the_loop(name):
    added = added_lines(_recipe_source(name))
    assert len(added.loop) <= MAX_LOOP_LINES, added.loop
    assert len(added.setup) == 2, added.setup  # one import, one recorder
    assert added.unmarked_uses == [], f"lines {added.unmarked_uses} use gradscope without {MARK!r}"


@pytest.mark.parametrize("name", sorted(TRUTHS))
def test_recipes_md_shows_each_recipes_added_lines(name):
    blocks = dict(DOC_BLOCK.findall(DOC.read_text(encoding="utf-8")))
    assert name in blocks, f"docs/RECIPES.md has no '<!-- recipe: {name} -->' block"
    shown = [line.strip() for line in blocks[name].splitlines() if line.strip()]
    source = _recipe_source(name)
    in_source = {line.strip() for line in source.splitlines()}
    assert [line for line in shown if line not in in_source] == []
    added = added_lines(source)
    assert [line for line in added.setup + added.loop if line not in shown] == []
    counts = re.search(
        rf"\(recipes/{name}\.py\) \|[^|\n]*\| (\d+) \+ (\d+) \|", DOC.read_text(encoding="utf-8")
    )
    assert counts, f"docs/RECIPES.md's table has no row for {name}.py"
    assert (int(counts[1]), int(counts[2])) == (len(added.setup), len(added.loop))


def test_line_count_sees_statements_not_physical_lines():
    source = (
        "from tb_gradscope import Recorder  # gradscope\n"
        "rec = Recorder(models=[m],  # gradscope\n"
        "               rules=['never(a, b)'])\n"
        "def step():\n"
        "    with rec.training_step():  # gradscope\n"
        "        x = 1\n"
        "        rec.apply(opt, g)\n"
    )
    added = added_lines(source)
    assert added.setup == [
        "from tb_gradscope import Recorder  # gradscope",
        "rec = Recorder(models=[m],  # gradscope",
    ]
    assert added.loop == ["with rec.training_step():  # gradscope"]
    assert added.unmarked_uses == [7]


# ----- running them -------------------------------------------------------------------


@dataclasses.dataclass
class Ran:
    name: str
    logs: RunLogs
    summary: dict[str, Any]
    check: tuple[int, str, str]
    warned: list[str]


# Every script's globals stay alive for the module: the recorder says each
# warning once per recorder id, and a freed recorder's id may be reused.
_ALIVE: list[dict[str, Any]] = []


def run_recipe(path: pathlib.Path, logdir: pathlib.Path) -> Ran:
    """Runs a recipe script in this process and reads its logs back."""
    with (
        warnings.catch_warnings(record=True) as caught,
        mock.patch.object(sys, "argv", [str(path), str(logdir)]),
    ):
        warnings.simplefilter("always")
        _ALIVE.append(runpy.run_path(str(path), run_name="__main__"))
    warned = [str(w.message) for w in caught if w.category.__module__.startswith("tb_gradscope")]
    (logs,) = load_logdir(str(logdir))
    args = build_parser().parse_args(["check", str(logdir)])
    out, err = io.StringIO(), io.StringIO()
    code = args.run(args, out, err)
    return Ran(path.stem, logs, run_summary(logs), (code, out.getvalue(), err.getvalue()), warned)


@pytest.fixture(scope="module", params=sorted(TRUTHS))
def ran(request, tmp_path_factory) -> Ran:
    return run_recipe(RECIPES / f"{request.param}.py", tmp_path_factory.mktemp(request.param))


@pytest.mark.slow
def test_every_loss_is_recorded_at_the_same_steps(ran):
    truth = TRUTHS[ran.name]
    assert sorted(ran.logs.grads) == RECORDED_STEPS
    for step in RECORDED_STEPS:
        assert sorted(ran.logs.grads[step]) == truth.losses, step


@pytest.mark.slow
def test_report_shows_the_flow_states_of_the_shape(ran):
    assert ran.summary["flowgraph"] is not None, "the run has no FlowGraph"
    cells = ran.summary["cells"]
    found = {(loss, scope): cells[loss][scope]["state"] for loss, scope in TRUTHS[ran.name].cells}
    assert found == TRUTHS[ran.name].cells


@pytest.mark.slow
def test_blocked_edges_name_the_cut_and_its_source_line(ran):
    edges = ran.summary["blocked_edges"]
    lines = _recipe_source(ran.name).splitlines()
    stop_lines = tuple(
        f"{ran.name}.py:{i}" for i, line in enumerate(lines, 1) if "tf.stop_gradient(" in line
    )
    for loss, scope, cause in TRUTHS[ran.name].cuts:
        found = [
            e
            for e in edges
            if e["loss"] == loss
            and e["cause"] == cause
            and (e["producer_scope"] == scope or e["producer_scope"].startswith(scope + "/"))
        ]
        assert found, (loss, scope, cause, edges)
        if cause == STOP:
            assert all((e["source"] or "").endswith(stop_lines) for e in found), (found, stop_lines)


@pytest.mark.slow
def test_every_trained_network_moves_at_recorded_steps(ran):
    steps = sorted(ran.logs.updates)
    assert RECORDED_STEPS[1:] == [s for s in steps if s > 0]
    for step in steps:
        table = ran.logs.updates[step]
        for scope in TRUTHS[ran.name].trained:
            assert table.row(scope)["update_norm"] > 0, (step, scope)


@pytest.mark.slow
def test_recipe_rules_are_recorded_and_check_passes(ran):
    code, out, err = ran.check
    assert ran.summary["rules"], "check would pass vacuously: the run recorded no rules"
    assert code == 0, out + err
    assert ran.summary["violations"] == []
    assert "no violations" in err


@pytest.mark.slow
def test_declared_pairs_record_drift(ran):
    assert sorted(ran.logs.drift) == sorted(TRUTHS[ran.name].drift)


@pytest.mark.slow
def test_recipe_runs_without_a_gradscope_warning(ran):
    assert ran.warned == []


# ----- the lines that matter, taken out ------------------------------------------------------


def _variant(name: str, old: str, new: str, tmp_path: pathlib.Path) -> pathlib.Path:
    source = _recipe_source(name)
    assert source.count(old) == 1, f"{name}.py no longer contains {old!r}"
    path = tmp_path / f"{name}_variant.py"
    path.write_text(source.replace(old, new), encoding="utf-8")
    return path


@pytest.mark.slow
def test_eager_recipe_without_its_analyze_lines_says_static_evidence_is_missing(tmp_path):
    old = "        if step == 0:  # gradscope\n            rec.analyze(train_step, *batch)  # gradscope\n"
    ran = run_recipe(_variant("eager", old, "", tmp_path), tmp_path / "logs")
    code, _, err = ran.check
    assert code == 0 and "has no FlowGraph" in err and "rec.analyze(step_fn" in err
    assert ran.summary["cells"]["td"]["target"]["state"] == NO_GRADIENT


@pytest.mark.slow
def test_ddpg_recipe_rules_catch_an_actor_optimizer_given_the_critic(tmp_path):
    old = '{"actor": actor_loss}, actor.trainable_variables)'
    new = '{"actor": actor_loss}, actor.trainable_variables + critic.trainable_variables)'
    ran = run_recipe(_variant("ddpg", old, new, tmp_path), tmp_path / "logs")
    code, out, _ = ran.check
    assert ran.summary["cells"]["actor"]["critic"]["state"] == fmt.UPDATES
    assert code == 1 and "only(actor, [actor])" in out


@pytest.mark.slow
def test_a2c_recipe_catches_the_advantage_without_stop_gradient(tmp_path):
    ran = run_recipe(
        _variant("a2c", "tf.stop_gradient(returns - values)", "returns - values", tmp_path),
        tmp_path / "logs",
    )
    code, out, _ = ran.check
    assert ran.summary["cells"]["actor"]["ac/value_head"]["state"] == fmt.UPDATES
    assert code == 1 and "blocked(actor, ac/value_head)" in out


@pytest.mark.slow
def test_byol_split_recipe_keeps_three_optimizer_iterations_per_step(tmp_path):
    ran = run_recipe(RECIPES / "byol_split.py", tmp_path / "logs")
    script = _ALIVE[-1]
    assert int(script["optimizer"].iterations.numpy()) == 3 * 30
    assert int(script["rec"].step.numpy()) == 30
    assert sorted(ran.logs.grads) == RECORDED_STEPS
