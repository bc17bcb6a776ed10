"""`tb-gradscope report`: the flow table, blocked edges, drift and violations per run."""

from __future__ import annotations

import io
import json

import pytest

from tb_gradscope import format as fmt
from tb_gradscope.commands import build_parser
from tests.support import rules_fixtures as rf


def report(*argv: str) -> tuple[int, str, str]:
    args = build_parser().parse_args(["report", *argv])
    out, err = io.StringIO(), io.StringIO()
    return args.run(args, out, err), out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def logdir(tmp_path_factory) -> str:
    root = tmp_path_factory.mktemp("report_logs")
    rf.dqn_logdir(root)
    conflict = fmt.make_info(
        fmt.Kind.CONFLICT, "td|aux", ["online", "online/l1", "online/l2"], {"losses": ["td", "aux"]}
    )
    rf.write_records(
        str(root / "ema"),
        rf.dqn_records(False)
        + [
            (conflict, 10, [[0.2], [0.9], [-0.6]]),
            (conflict, 20, [[-0.1], [0.5], [-0.8]]),
        ],
    )
    rf.write_drift_run(str(root / "ema"), tau_used=0.05, declared_tau=0.05, steps=21)
    rf.write_drift_run(
        str(root / "frozen"), tau_used=0.05, declared_tau=0.05, steps=21, frozen=True
    )
    return str(root)


def test_text_shows_scope_rows_loss_columns_states_and_norms(logdir):
    code, out, err = report(logdir, "--run", "leaky")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == "run leaky at step 20 (3 recorded steps, 0..20); FlowGraph traced from tf2"
    header = next(line for line in lines if line.strip().startswith("scope"))
    assert header.split() == ["scope", "td"]
    rows = {
        line.split()[0]: line.split()[1:]
        for line in lines
        if line.startswith("  ") and line.split()[0] in rf.DQN_SCOPES
    }
    assert rows["target/l1"] == ["updates", "0.75"]
    assert rows["online/l1"] == ["updates", "3"]
    assert "    target/l1" in out  # children indented under their parent


def test_clean_run_lists_the_blocked_edge_with_its_source_line(logdir):
    code, out, _ = report(logdir, "--run", "clean", "--step", "10")
    assert code == 0
    assert "run clean at step 10" in out
    rows = {
        line.split()[0]: line.split()[1:]
        for line in out.splitlines()
        if line.startswith("  ") and line.split()
    }
    assert rows["target/l1"] == ["blocked"]
    assert (
        "td: target/l1 -> loss:td  StopGradient 'StopGradient' (stop_gradient) at train.py:42 in train_step"
        in out
    )


def test_drift_summary_shows_the_latest_drift_per_pair(logdir):
    code, out, _ = report(logdir, "--run", "ema")
    assert code == 0
    line = next(text for text in out.splitlines() if "target<-online" in text)
    assert "(target <- online) at step 20: drift" in line and "declared tau 0.05" in line
    assert out.split("anomalies:\n")[1].startswith("  none")


def test_gradient_conflict_lists_the_most_opposed_scopes_at_the_step(logdir):
    _, out, _ = report(logdir, "--run", "ema", "--step", "10")
    assert "  td|aux at step 10: online/l2 -0.6, online 0.2, online/l1 0.9" in out
    _, out, _ = report(logdir, "--run", "ema")
    assert "  td|aux at step 20: online/l2 -0.8, online -0.1, online/l1 0.5" in out
    _, out, _ = report(logdir, "--run", "clean")
    assert "gradient conflict (cosine per shared scope, most opposed first):\n  not recorded" in out


def test_anomalies_derived_from_drift_are_listed(logdir):
    code, out, _ = report(logdir, "--run", "frozen")
    assert code == 0
    anomalies = out.split("anomalies:\n")[1].split("\n\n")[0]
    assert "target_frozen" in anomalies and "did not move" in anomalies


def test_json_is_one_document_with_cells_drift_and_violations(logdir, tmp_path):
    rules = tmp_path / "rules.toml"
    rules.write_text(
        'rules = ["never(td, target/*)", "tracks(target, online, tau=0.05)"]\n', encoding="utf-8"
    )
    code, out, err = report(logdir, "--format", "json", "--rules", str(rules))
    assert code == 0, err
    doc = json.loads(out)
    runs = {r["run"]: r for r in doc["runs"]}
    assert sorted(runs) == ["clean", "ema", "frozen", "leaky", "recorded"]
    leaky = runs["leaky"]
    assert leaky["cells"]["td"]["target"] == {
        "state": "updates",
        "static": "updates",
        "l2": 0.75,
        "nonfinite": 0.0,
    }
    # One entry for the rule: seen at trace time and over the steps.
    assert [
        (v["name"], v["at_trace"], v["evidence"]["at"])
        for v in leaky["violations"]
        if v["name"].startswith("never")
    ] == [
        ("never(td, target/*)", True, "step"),
    ]
    assert [v["evidence"]["unmatched"] for v in runs["clean"]["violations"]] == [
        "pair"
    ]  # no drift there
    assert runs["ema"]["drift"][0]["tau"] == pytest.approx(0.05, rel=1e-3)
    recorded = [v for v in runs["recorded"]["violations"] if v["name"].startswith("never")]
    assert [(v["source"], v["step"]) for v in recorded] == [("recorded", 30)]
    # tracks() is checked on every run: runs without the pair break it.
    assert any(v["name"].startswith("tracks(") for v in runs["leaky"]["violations"])
    assert not any(v["name"].startswith("tracks(") for v in runs["ema"]["violations"])


def test_hostile_names_are_escaped_in_text(logdir):
    code, out, _ = report(logdir, "--run", "recorded")
    assert code == 0
    assert "\x1b" not in out and "target/\\x1b[31mred" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--step", "5"], "step 5 is not recorded in run 'clean' (nearest recorded: 0, 10"),
        (["--run", "nope"], "run 'nope' has no gradscope data"),
    ],
)
def test_bad_step_or_run_exits_2_saying_what_exists(logdir, argv, message):
    code, out, err = (
        report(logdir, "--run", "clean", *argv) if argv[0] == "--step" else report(logdir, *argv)
    )
    assert code == 2 and out == ""
    assert message in err


def test_missing_logdir_exits_2(tmp_path):
    code, _, err = report(str(tmp_path / "nope"))
    assert code == 2 and "does not exist" in err


def test_hostile_log_gives_strict_json_and_escaped_text(tmp_path):
    scopes = ["net", "net/\x1b]0;pwned\x07", "net/line\nbreak", "net/\u202eevil"]
    grads = fmt.make_info(fmt.Kind.GRAD_STATS, "l\x1bss", scopes)
    drift = fmt.make_info(
        fmt.Kind.DRIFT, "p\x9b", ["net"], {"target": "net", "online": "x", "tau": float("nan")}
    )
    nan, inf = float("nan"), float("inf")
    rf.write_records(
        str(tmp_path / "run\x1b"),
        [
            (
                grads,
                0,
                [[1, nan, nan, 3, 0], [1, inf, inf, 1, 0], [1, 0.5, 0.5, 0, 0], [0, 0, 0, 0, 0]],
            ),
            (drift, 0, [[nan, nan, 1.0, 0.0, nan]]),
        ],
    )

    def strict(constant):
        raise AssertionError(f"non-standard JSON constant {constant}")

    code, out, err = report(str(tmp_path), "--format", "json")
    assert code == 0, err
    (run,) = json.loads(out, parse_constant=strict)["runs"]
    assert run["cells"]["l\x1bss"]["net"]["state"] == "nonfinite"
    assert run["cells"]["l\x1bss"]["net"]["l2"] is None
    assert all(ord(c) < 128 for c in out)
    code, out, err = report(str(tmp_path))
    assert code == 0, err
    for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
        assert raw not in out
    assert "net/line\\x0abreak" in out and "net/\\u202eevil" in out


def test_run_with_only_a_flowgraph_shows_the_static_states(tmp_path):
    records = rf.dqn_records(leaky=True)
    rf.write_records(str(tmp_path / "traced"), records[:1])
    code, out, err = report(str(tmp_path))
    assert code == 0, err
    assert out.startswith("run traced (no recorded steps); FlowGraph traced from tf2")
    rows = {
        line.split()[0]: line.split()[1:]
        for line in out.splitlines()
        if line.startswith("  ") and line.split()
    }
    assert rows["target/l1"] == ["updates"] and rows["online"] == ["updates"]


def test_run_holding_only_update_stats_still_reports_them(tmp_path):
    """A step whose gradients were not recorded (only `rec.apply`) still shows
    ||delta theta|| per scope."""
    import keras
    import tensorflow as tf

    from tb_gradscope import Recorder
    from tb_gradscope.read.logdir import load_logdir
    from tb_gradscope.read.summary import run_summary

    net = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, name="l1")], name="net")
    opt = keras.optimizers.SGD(0.1)
    rec = Recorder(str(tmp_path), every_n_steps=1, models={"net": net})
    for _ in range(2):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(net(tf.ones((4, 3))) ** 2)
        rec.apply(
            opt, list(zip(tape.gradient(loss, net.trainable_variables), net.trainable_variables))
        )
    rec.close()
    (logs,) = load_logdir(str(tmp_path))
    report = run_summary(logs, step=1)
    assert report["scopes"] == ["net", "net/l1"]
    assert report["losses"] == []
    assert report["updates"]["net/l1"]["update_norm"] == pytest.approx(
        float(logs.updates[1].row("net/l1")["update_norm"])
    )
    assert report["updates"]["net/l1"]["update_norm"] > 0


def test_a_run_traced_from_pytorch_says_pytorch(tmp_path):
    records = rf.dqn_records(leaky=False)
    info, step, (flowgraph,) = records[0]
    torch_graph = json.loads(json.dumps(flowgraph))
    torch_graph["source"] = "torch"
    rf.write_records(str(tmp_path / "torch_dqn"), [(info, step, [torch_graph]), *records[1:]])
    code, out, err = report(str(tmp_path))
    assert code == 0, err
    assert out.splitlines()[0].endswith("; FlowGraph traced from PyTorch")
    code, out, err = report(str(tmp_path), "--format", "json")
    (run,) = json.loads(out)["runs"]
    assert run["flowgraph"]["source"] == "torch"  # the data keeps the field's value


def test_an_update_not_measured_is_said_so_never_shown_as_zero(tmp_path):
    """A TF1 step written before its critic's train op ran (train ops in long
    blocks) stores the critic's ||delta theta|| as NaN: `report` says "not
    measured" for it, and JSON carries the scopes, never a 0.0."""
    updates = fmt.make_info(fmt.Kind.UPDATE_STATS, "", ["actor", "critic"])
    rf.write_records(str(tmp_path / "ppo"), [(updates, 40, [[0.3, 2.0], [float("nan"), 1.5]])])
    code, out, _ = report(str(tmp_path), "--step", "40")
    assert code == 0
    assert "not measured at step 40: critic" in out, out
    code, out, _ = report(str(tmp_path), "--step", "40", "--format", "json")
    (run,) = json.loads(out)["runs"]
    assert run["unmeasured_updates"] == ["critic"]
    assert run["updates"]["critic"]["update_norm"] is None


def test_weights_gone_non_finite_are_not_called_unmeasured(tmp_path):
    """Both norms NaN is what an update that made the weights NaN measures:
    `report` lists only the scope whose weights it read (finite ‖θ‖) and whose
    ‖Δθ‖ it did not, the rule the tab follows (docs/FORMAT.md)."""
    updates = fmt.make_info(fmt.Kind.UPDATE_STATS, "", ["critic", "diverged"])
    nan = float("nan")
    rf.write_records(str(tmp_path / "ppo"), [(updates, 40, [[nan, 1.5], [nan, nan]])])
    code, out, _ = report(str(tmp_path), "--step", "40", "--format", "json")
    assert code == 0
    (run,) = json.loads(out)["runs"]
    assert run["unmeasured_updates"] == ["critic"]
