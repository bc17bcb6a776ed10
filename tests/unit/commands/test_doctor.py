"""`tb-gradscope doctor` and the findings route: what is probably a bug, found without rules.

On the committed demo logs: no finding on a clean twin, a finding naming the
leaking loss and scope on each leaky twin (the scope or loss of a rule the
demo's rules file says the twin breaks), whose copyable rule fails on the
leaky twin and holds on the clean one. The plugin's findings route serves the
same findings as `doctor --format json`. Exit codes, JSON, text escaping, and
the numeric findings on hand-built records. The correctness corpus is in
tests/e2e/corpus/test_doctor_corpus.py.
"""

from __future__ import annotations

import argparse
import io
import json
import math
import pathlib
import subprocess
import sys

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import format as fmt
from tb_gradscope import rules as rules_lib
from tb_gradscope.commands import doctor
from tb_gradscope.format.flowgraph import NODE_SCOPE
from tb_gradscope.plugin.plugin import GradscopePlugin
from tb_gradscope.read import finding as F
from tb_gradscope.read.findings import diagnose
from tb_gradscope.read.logdir import load_logdir
from tb_gradscope.read.runs import RunLogs
from tb_gradscope.read.violations import evaluate
from tb_gradscope.rules.model import loss_matches
from tests.support import providers
from tests.support.run_logs import run_of_rows

DEMO_LOGS = pathlib.Path(__file__).resolve().parents[3] / "demo_logs"
CLEAN_TWINS = [
    ("actor_critic", "clean"),
    ("dqn", "clean"),
    ("dqn3_grad_start", "clean"),
    ("dqn_tf1", "clean"),
    ("dqn_tf1", "placeholder"),
    ("ema_lstm", "clean"),
    ("multihead", "clean"),
]
LEAKY_TWINS = ["actor_critic", "dqn", "dqn3_grad_start", "dqn_tf1", "ema_lstm"]
# Leaky twins whose flow is a correct design elsewhere: only a rule states the intent they break.
INTENT_ONLY = {
    "multihead": "loss2's optimizer without var_list trains Agent/layer1 beside loss1's: the flow of seed 01 "
    "itself and of the README's TF1 quickstart, where both var_lists take in layer1 by design",
}


def _doctor(logdir, run=None, fmt_="json"):
    out, err = io.StringIO(), io.StringIO()
    code = doctor.run(
        argparse.Namespace(logdir=str(logdir), run_name=run, format=fmt_), out=out, err=err
    )
    return code, out.getvalue(), err.getvalue()


def _findings(logdir, run):
    code, out, err = _doctor(logdir, run)
    (entry,) = json.loads(out)["runs"]
    return code, entry["findings"], err


def _broken_rules(demo: str) -> list:
    """The rules the demo's leaky twin breaks (its rules file says so)."""
    return list(rules_lib.parse_rules_file(str(DEMO_LOGS / demo / "rules.toml")).rules)


def _names_a_broken_rule(finding: dict, rules: list) -> bool:
    """The finding's scope is a rule's target (tracks), or its loss is the
    rule's and its scope one the rule forbids (or, for `updates`, requires)."""
    for rule in rules:
        if isinstance(rule, rules_lib.Tracks):
            if rules_lib.scope_matches(finding["scope"], rule.target):
                return True
        elif loss_matches(finding["loss"], rule.loss):
            if isinstance(rule, rules_lib.Only):
                if not rule.allows(finding["scope"]):
                    return True
            elif isinstance(rule, rules_lib.Updates):
                if rule.requires(finding["scope"]):
                    return True
            elif rules_lib.scope_matches(finding["scope"], rule.scope):
                return True
    return False


def _violations(logdir, run, rule_text: str) -> list:
    (logs,) = load_logdir(str(logdir), run)
    return evaluate(logs, [rules_lib.parse_rule(rule_text)])


# ----- the demos -------------------------------------------------------------------


@pytest.mark.parametrize("demo,twin", CLEAN_TWINS)
def test_clean_demo_twin_has_no_finding(demo, twin):
    code, found, _ = _findings(DEMO_LOGS / demo, twin)
    assert found == [] and code == doctor.CLEAN, json.dumps(found, indent=1)


@pytest.mark.parametrize("demo", LEAKY_TWINS)
def test_leaky_demo_twin_has_a_finding_naming_the_leaking_loss_and_scope(demo):
    code, found, _ = _findings(DEMO_LOGS / demo, "leaky")
    assert code == doctor.FOUND and found
    rules = _broken_rules(demo)
    named = [f for f in found if _names_a_broken_rule(f, rules)]
    assert named, (
        f"no finding names a loss/scope of {[str(r) for r in rules]}: {json.dumps(found, indent=1)}"
    )


@pytest.mark.parametrize("demo", sorted(INTENT_ONLY))
def test_intent_only_leaky_twin_is_no_finding_but_fails_its_rules(demo):
    code, found, _ = _findings(DEMO_LOGS / demo, "leaky")
    assert (code, found) == (doctor.CLEAN, []), json.dumps(found, indent=1)
    assert any(_violations(DEMO_LOGS / demo, "leaky", str(rule)) for rule in _broken_rules(demo))


@pytest.mark.slow
@pytest.mark.parametrize("demo", [d for d in LEAKY_TWINS if isinstance(d, str)])
def test_finding_rule_fails_on_the_leaky_twin_and_holds_on_the_clean_one(demo):
    _, found, _ = _findings(DEMO_LOGS / demo, "leaky")
    for f in found:
        assert f["rule"], f
        assert _violations(DEMO_LOGS / demo, "leaky", f["rule"]), (
            f"{f['rule']} holds on the leaky twin"
        )
        assert not _violations(DEMO_LOGS / demo, "clean", f["rule"]), (
            f"{f['rule']} fails on the clean twin"
        )


def test_the_tf1_demo_fix_speaks_the_session_not_the_tape():
    """The committed TF1 DQN (a Session graph) is told to keep its target out
    of the gradient the TF1 way: no GradientTape exists there."""
    code, found, _ = _findings(DEMO_LOGS / "dqn_tf1", "leaky")
    (finding,) = found
    assert (code, finding["kind"]) == (doctor.FOUND, F.TARGET_TRAINED)
    assert "sess.run" in finding["fix"] and "tape" not in finding["fix"] + finding["why"]


# ----- the command line ---------------------------------------------------------------


def test_doctor_exit_status_is_1_with_findings_and_0_without():
    assert _doctor(DEMO_LOGS / "dqn", "leaky")[0] == doctor.FOUND
    assert _doctor(DEMO_LOGS / "dqn", "clean")[0] == doctor.CLEAN


def test_doctor_on_a_missing_logdir_exits_2_in_one_line(tmp_path):
    code, out, err = _doctor(tmp_path / "nope")
    assert code == doctor.UNREADABLE and out == ""
    assert err.count("\n") == 1 and "does not exist" in err and "Traceback" not in err


def test_doctor_on_a_logdir_without_gradscope_data_exits_2(tmp_path):
    (tmp_path / "empty_run").mkdir()
    code, _, err = _doctor(tmp_path)
    assert code == doctor.UNREADABLE and "no gradscope data" in err


def test_doctor_json_holds_every_field_of_a_finding():
    _, found, _ = _findings(DEMO_LOGS / "dqn", "leaky")
    (f,) = found
    assert set(f) == {
        "kind",
        "what",
        "loss",
        "scope",
        "pair",
        "edge",
        "evidence",
        "why",
        "fix",
        "rule",
        "first_step",
        "last_step",
        "steps",
        "severity",
        "partial",
        "evidence_text",
    }
    assert (f["severity"], f["partial"]) == (F.LEAK, False)
    assert f["evidence_text"].startswith(
        f"steps {f['first_step']}..{f['last_step']} ({f['steps']} recorded); "
    )
    assert (f["kind"], f["loss"], f["scope"], f["rule"]) == (
        F.TARGET_TRAINED,
        "td",
        "target",
        "never(td, target/*)",
    )
    assert f["steps"] == f["evidence"]["steps_seen"] > 1 and f["first_step"] <= f["last_step"]
    assert "var_list" in f["fix"] and "stop_gradient" in f["fix"]


def test_doctor_text_names_what_where_evidence_why_fix_and_rule():
    code, out, _ = _doctor(DEMO_LOGS / "actor_critic", "leaky", "text")
    assert code == doctor.FOUND
    for label in (
        "[value_not_cut]",
        "where:",
        "evidence:",
        "why:",
        "fix:",
        "rule:     never(actor, ac/critic/*)",
    ):
        assert label in out, out


def test_doctor_is_registered_and_runs_as_a_command():
    done = subprocess.run(
        [sys.executable, "-m", "tb_gradscope.cli", "doctor", str(DEMO_LOGS / "ema_lstm")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == doctor.FOUND, done.stderr
    assert "run clean: no findings" in done.stdout and "[pair_anomaly]" in done.stdout
    assert "never_synced" in done.stdout and "tracks(target, online, tau=0.01)" in done.stdout


def test_doctor_never_imports_tensorflow():
    code = (
        "import sys\n"
        "from tb_gradscope import cli\n"
        f"status = cli.main(['doctor', {str(DEMO_LOGS / 'dqn')!r}, '--format', 'json'])\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras'))\n"
        "print('RESULT', status, bad, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "RESULT 1 []" in done.stderr, done.stderr[-2000:]


def test_hostile_names_print_as_text():
    f = F.Finding(
        kind=F.TARGET_TRAINED,
        what="loss 'x\x1b[2J' updates 'y\u202e'",
        loss="x\x1b[2J",
        scope="y\u202e",
        evidence={"k\x07": "v\x1b"},
        why="w",
        fix="f",
        rule="never(x, y)",
        first_step=0,
        last_step=1,
        steps=2,
    )
    text = doctor.render_run("run\x1b]0;", [f])
    assert "\x1b" not in text and "\u202e" not in text and "\x07" not in text
    assert "\\x1b" in text and "\\u202e" in text


# ----- the plugin route --------------------------------------------------------------


@pytest.fixture(scope="module")
def client() -> werkzeug_test.Client:
    samples = {"gradscope": 10_000}
    provider = providers.python_provider(str(DEMO_LOGS), samples)
    plugin = GradscopePlugin(base_plugin.TBContext(data_provider=provider, sampling_hints=samples))
    return werkzeug_test.Client(application.TensorBoardWSGI([plugin]))


@pytest.mark.slow
@pytest.mark.parametrize(
    "demo,twin",
    CLEAN_TWINS
    + [(d, "leaky") for d in LEAKY_TWINS if isinstance(d, str)]
    + [("multihead", "leaky")],
)
def test_findings_route_serves_what_doctor_json_prints(client, demo, twin):
    response = client.get("/data/plugin/gradscope/findings", query_string={"run": f"{demo}/{twin}"})
    assert response.status_code == 200, response.get_data(as_text=True)
    served = json.loads(response.get_data(as_text=True))
    _, printed, _ = _findings(DEMO_LOGS / demo, twin)
    assert served == {"run": f"{demo}/{twin}", "findings": printed}


def test_findings_route_names_a_missing_run_and_needs_one(client):
    response = client.get("/data/plugin/gradscope/findings", query_string={"run": "no/such"})
    assert response.status_code == 404 and "no/such" in response.get_data(as_text=True)
    assert client.get("/data/plugin/gradscope/findings").status_code == 400
    response = client.get(
        "/data/plugin/gradscope/findings", query_string={"run": "dqn/leaky", "format": "csv"}
    )
    assert response.status_code == 400


# ----- numeric findings on hand-built records -------------------------------------------


def _graph(static: str = fmt.UPDATES) -> fmt.FlowGraph:
    return fmt.FlowGraph(
        losses=[fmt.LossInfo("mse", optimizer="opt0")],
        scopes=["net", "net/l1"],
        cells={"mse": {"net": static, "net/l1": static}},
        nodes=[fmt.GraphNode("net/l1", NODE_SCOPE, "net/l1")],
    )


def _row(l2: float, nonfinite: float = 0.0) -> dict:
    return {"grad_vars": 2.0, "l2": l2, "max_abs": l2, "nonfinite": nonfinite, "zero_frac": 0.0}


def _records(l2s, events=(), static=fmt.UPDATES) -> RunLogs:
    grads = {
        s: {
            "mse": {
                "net": _row(v, float(not math.isfinite(v))),
                "net/l1": _row(v, float(not math.isfinite(v))),
            }
        }
        for s, v in enumerate(l2s)
    }
    return run_of_rows([(0, _graph(static))], grads, events=events)


def test_gradient_zero_at_the_last_three_recorded_steps_is_vanishing():
    (f,) = diagnose(_records([1.0, 0.5, 0.0, 0.0, 0.0]))
    assert (f.kind, f.loss, f.scope, f.first_step, f.last_step) == (F.VANISHING, "mse", "net", 2, 4)
    assert diagnose(_records([1.0, 0.0, 0.0, 0.5])) == []  # it came back


def test_non_finite_gradient_at_two_recorded_steps_is_a_finding_unless_the_scaler_skipped_them():
    (f,) = diagnose(_records([1.0, math.nan, 1.0, math.inf]))
    assert (f.kind, f.steps, f.first_step, f.last_step) == (F.NONFINITE, 2, 1, 3)
    skipped = [
        fmt.Event(type=fmt.SKIPPED, name="loss_scale", step=s, message="skipped") for s in (1, 3)
    ]
    assert diagnose(_records([1.0, math.nan, 1.0, math.inf], skipped)) == []
    assert diagnose(_records([1.0, math.nan, 1.0, 1.0])) == []  # once is not persisting


def test_numeric_findings_only_where_the_loss_is_meant_to_update():
    assert diagnose(_records([0.0, 0.0, 0.0, 0.0], static=fmt.IGNORED)) == []


def test_findings_are_plain_json():
    (f,) = diagnose(_records([1.0, math.nan, 1.0, math.inf]))
    json.dumps(f.to_json(), allow_nan=False)


def test_a_long_run_is_diagnosed_on_1000_steps_spread_evenly_its_last_ones_kept():
    from tb_gradscope.read.runs import KEEP_LAST_STEPS, MAX_EXAMINED_STEPS, thin

    steps = list(range(0, 50_000, 5))
    kept = thin(steps)
    assert len(kept) == MAX_EXAMINED_STEPS and kept == sorted(set(kept))
    assert kept[0] == 0 and kept[-KEEP_LAST_STEPS:] == steps[-KEEP_LAST_STEPS:]
    assert max(b - a for a, b in zip(kept, kept[1:])) <= 5 * (len(steps) // MAX_EXAMINED_STEPS + 1)
    assert thin(steps[:300]) == steps[:300]


def _evidence_of_every_demo_run(command: str) -> list[tuple[str, dict]]:
    from tb_gradscope.commands import build_parser

    args = build_parser().parse_args([command, str(DEMO_LOGS), "--format", "json"])
    out, err = io.StringIO(), io.StringIO()
    args.run(args, out, err)
    runs = json.loads(out.getvalue())["runs"]
    items = [f for run in runs for f in run.get("findings", []) + run.get("violations", [])]
    return [(item.get("kind") or item.get("name"), item["evidence"]) for item in items]


@pytest.mark.parametrize("command", ["doctor", "check"])
def test_every_demo_finding_and_violation_words_its_evidence(command):
    """Evidence reads as short phrases with their numbers ("optimizer step
    opt0", "target target of online online (a declared pair)"), never as a
    key=value dump ("pairs declared True"), in doctor, check and the tab alike
    (all three print `evidence_sentences`)."""
    from tb_gradscope.read.evidence import WORDED_KEYS, evidence_sentences

    shown = _evidence_of_every_demo_run(command)
    assert shown, f"{command} found nothing on the demo logs"
    for name, evidence in shown:
        assert set(evidence) - {"at"} <= WORDED_KEYS, (name, set(evidence) - WORDED_KEYS)
        assert all(" True" not in s and " False" not in s for s in evidence_sentences(evidence))
