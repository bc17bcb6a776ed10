"""doctor tells a leak from a hazard, a design from a bug, and says when its
evidence is partial (issues 35 item 7 and 10, 38), on hand-built records.

- A trainable target reached by an uncut gradient that no optimizer step
  applies (keras-io's DDPG computes its targets inside the critic tape and
  differentiates only the critic) is a hazard: a note, exit 0 unless --strict.
- Two optimizers that both write a trunk, each loss also training a head of
  its own (the README's TF1 quickstart), are a design; an optimizer taking in
  everything another loss trains (a critic optimizer training the actor) is
  a finding.
- A leak from one loss into another's value explains their fighting over the
  trunk: one finding, whose rule holds once the leak is cut.
- A run without a FlowGraph is diagnosed on its tables, marked partial, and
  a value head named after another loss is still found.
- A TF1 run's fix texts are TF1's (an assign op, not set_weights).
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import json

import pytest

from tb_gradscope import format as fmt
from tb_gradscope.commands import doctor
from tb_gradscope.format.flowgraph import NODE_LOSS, NODE_SCOPE, TRAINABLE
from tb_gradscope.read import anomalies
from tb_gradscope.read import finding as F
from tb_gradscope.read.findings import diagnose
from tb_gradscope.read.runs import RunLogs
from tests.support import rules_fixtures as rf
from tests.support.run_logs import run_of_rows
from tests.unit.commands.test_doctor_trainable import _graph as target_graph
from tests.unit.commands.test_doctor_trainable import _records as target_records


def _row(l2: float = 1.0) -> dict:
    return {"grad_vars": 2.0, "l2": l2, "max_abs": 0.5 * l2, "nonfinite": 0.0, "zero_frac": 0.0}


def _doctor(logdir, *extra: str) -> tuple[int, dict, str]:
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(
        logdir=str(logdir), run_name=None, format="json", strict="--strict" in extra
    )
    code = doctor.run(args, out=out, err=err)
    return code, json.loads(out.getvalue()), err.getvalue()


def _write(
    run_dir, graph: fmt.FlowGraph | None, grads: dict[int, dict[str, dict[str, dict]]]
) -> None:
    """Writes a FlowGraph (if any) and GRAD_STATS tables as the recorder does."""
    records = (
        [(fmt.make_info(fmt.Kind.FLOWGRAPH), 0, [graph.to_json()])] if graph is not None else []
    )
    columns = list(fmt.KIND_SPECS[fmt.Kind.GRAD_STATS].columns)
    for step, per_loss in sorted(grads.items()):
        for loss, rows in per_loss.items():
            scopes = list(rows)
            info = fmt.make_info(fmt.Kind.GRAD_STATS, loss, scopes)
            records.append((info, step, [[rows[s].get(c, 0.0) for c in columns] for s in scopes]))
    rf.write_records(str(run_dir), records)


# ----- leak or hazard ----------------------------------------------------------------------


def test_a_reached_trainable_target_no_optimizer_writes_is_a_hazard():
    (f,) = diagnose(target_records(target_graph()))
    assert (f.kind, f.severity) == (F.TARGET_NOT_CUT, F.HAZARD)


def test_hazards_exit_0_as_notes_and_1_under_strict(tmp_path):
    grads = {
        s: {
            "critic": {
                "critic": _row(),
                "critic/l1": _row(),
                "target_critic": _row(),
                "target_critic/l1": _row(),
            }
        }
        for s in range(4)
    }
    _write(tmp_path / "keras_io_ddpg", target_graph(), grads)
    code, doc, err = _doctor(tmp_path)
    (f,) = doc["runs"][0]["findings"]
    assert (code, f["kind"], f["severity"]) == (0, F.TARGET_NOT_CUT, F.HAZARD), err
    assert "0 finding(s), 1 note(s)" in err
    assert _doctor(tmp_path, "--strict")[0] == 1


# ----- two optimizers on one scope ------------------------------------------------------------


def _two_optimizers(cells: dict[str, dict[str, str]], edges: list[tuple[str, str]]) -> RunLogs:
    scopes = sorted({s for row in cells.values() for s in row})
    holders = [s for s in scopes if not any(o.startswith(s + "/") for o in scopes)]
    graph = fmt.FlowGraph(
        losses=[fmt.LossInfo(loss, optimizer=f"opt{i}") for i, loss in enumerate(cells)],
        scopes=scopes,
        cells=cells,
        nodes=[fmt.GraphNode(h, NODE_SCOPE, h) for h in holders]
        + [fmt.GraphNode(f"loss:{name}", NODE_LOSS, name) for name in cells],
        edges=[fmt.GraphEdge(a, b, 1) for a, b in edges],
        applied=scopes,
        trainable={s: TRAINABLE for s in scopes},
    )
    grads = {
        s: {
            loss: {sc: _row() for sc, st in row.items() if st == fmt.UPDATES}
            for loss, row in cells.items()
        }
        for s in range(4)
    }
    return run_of_rows([(0, graph)], grads)


def test_two_var_lists_that_both_take_in_a_shared_trunk_are_a_design():
    """Seed 01's Agent as the README's TF1 quickstart writes it: layer1 in both var_lists."""
    u, i = fmt.UPDATES, fmt.INDEPENDENT
    records = _two_optimizers(
        {
            "loss1": {"Agent": u, "Agent/layer1": u, "Agent/layer2_1": u, "Agent/layer2_2": i},
            "loss2": {"Agent": u, "Agent/layer1": u, "Agent/layer2_1": i, "Agent/layer2_2": u},
        },
        [
            ("Agent/layer1", "Agent/layer2_1"),
            ("Agent/layer1", "Agent/layer2_2"),
            ("Agent/layer2_1", "loss:loss1"),
            ("Agent/layer2_2", "loss:loss2"),
        ],
    )
    assert diagnose(records) == []


def test_an_optimizer_writing_all_another_loss_trains_is_shared_by_optimizers():
    """TF1 DDPG whose critic optimizer has no var_list: the TD error trains the actor."""
    u, g = fmt.UPDATES, fmt.IGNORED
    records = _two_optimizers(
        {
            "td_error": {"Actor": u, "Actor/eval": u, "Critic": u, "Critic/eval": u},
            "a_loss": {"Actor": u, "Actor/eval": u, "Critic": g, "Critic/eval": g},
        },
        [
            ("Actor/eval", "Critic/eval"),
            ("Critic/eval", "loss:td_error"),
            ("Critic/eval", "loss:a_loss"),
        ],
    )
    (f,) = diagnose(records)
    assert (f.kind, f.loss, f.scope, f.severity) == (
        F.SHARED_BY_OPTIMIZERS,
        "td_error",
        "Actor",
        F.LEAK,
    )
    assert f.evidence["other_loss"] == "a_loss" and "everything 'a_loss' trains" in f.why


# ----- a leak explains the fight -----------------------------------------------------------------

AC = ["ac", "ac/trunk", "ac/actor_head", "ac/critic_head"]


def _shared_trunk(graph: bool, trunk_cosine: float = -0.9, split: bool = False) -> RunLogs:
    """An actor-critic with a shared trunk whose advantage is not cut: the
    actor trains the critic head, and the two fight over the trunk. `split`:
    an optimizer per loss, the actor's over the trunk and its own head, so
    the actor's gradient only reaches the critic head (and, through it, the
    trunk)."""
    u, i = fmt.UPDATES, fmt.INDEPENDENT
    cells = {
        "actor": {
            "ac": u,
            "ac/trunk": u,
            "ac/actor_head": u,
            "ac/critic_head": fmt.IGNORED if split else u,
        },
        "critic": {"ac": u, "ac/trunk": u, "ac/actor_head": i, "ac/critic_head": u},
    }
    flowgraph = fmt.FlowGraph(
        losses=[
            fmt.LossInfo("actor", optimizer="opt0"),
            fmt.LossInfo("critic", optimizer="opt1" if split else "opt0"),
        ],
        scopes=AC,
        cells=cells,
        nodes=[fmt.GraphNode(h, NODE_SCOPE, h) for h in AC[1:]]
        + [
            fmt.GraphNode("loss:actor", NODE_LOSS, "actor"),
            fmt.GraphNode("loss:critic", NODE_LOSS, "critic"),
        ],
        edges=[
            fmt.GraphEdge("ac/trunk", "ac/actor_head", 1),
            fmt.GraphEdge("ac/trunk", "ac/critic_head", 1),
            fmt.GraphEdge("ac/actor_head", "loss:actor", 1),
            fmt.GraphEdge("ac/critic_head", "loss:actor", 1),
            fmt.GraphEdge("ac/critic_head", "loss:critic", 1),
        ],
        applied=AC,
        trainable={s: TRAINABLE for s in AC},
    )
    grads = {
        s: {
            loss: {sc: _row() for sc, st in row.items() if st in (u, fmt.IGNORED)}
            for loss, row in cells.items()
        }
        for s in range(4)
    }
    conflict = {
        ("actor", "critic"): [
            (s, {"ac/trunk": trunk_cosine, "ac/critic_head": trunk_cosine}) for s in range(4)
        ]
    }
    return run_of_rows([(0, flowgraph)] if graph else [], grads, conflict)


def test_a_value_leak_is_the_one_finding_beside_the_fight_it_causes():
    (f,) = diagnose(_shared_trunk(graph=True))
    assert (f.kind, f.loss, f.scope, f.severity) == (
        F.VALUE_NOT_CUT,
        "actor",
        "ac/critic_head",
        F.LEAK,
    )
    assert f.rule == "never(actor, ac/critic_head/*)"  # holds whether the value is cut or dropped


def test_a_value_leak_past_a_head_the_actors_optimizer_leaves_out_is_found_at_the_head():
    """Two optimizers: the actor's gradient enters at the critic head (its
    optimizer drops it there) and flows on into the trunk both train. The
    head is where the value enters; the trunk, which the actor reaches through
    its own head too, is the value's input: blocked(actor, ac/trunk/*) would
    be false on the fixed code."""
    (f,) = diagnose(_shared_trunk(graph=True, split=True))
    assert (f.kind, f.loss, f.scope, f.severity) == (
        F.VALUE_NOT_CUT,
        "actor",
        "ac/critic_head",
        F.HAZARD,
    )
    assert f.rule == "blocked(actor, ac/critic_head/*)"


# ----- no FlowGraph: partial ------------------------------------------------------------------


def test_without_a_flowgraph_a_head_named_after_another_loss_is_found_and_marked_partial():
    (f,) = diagnose(_shared_trunk(graph=False))
    assert (f.kind, f.loss, f.scope, f.partial) == (
        F.VALUE_NOT_CUT,
        "actor",
        "ac/critic_head",
        True,
    )
    assert (
        f.rule == "never(actor, ac/critic_head/*)"
    )  # blocked(...) cannot be checked without a FlowGraph


def test_doctor_warns_that_a_run_without_flowgraph_is_diagnosed_partially(tmp_path):
    rf.write_records(str(tmp_path / "eager"), rf.dqn_records(leaky=True)[1:])  # no FLOWGRAPH record
    code, doc, err = _doctor(tmp_path)
    (run,) = doc["runs"]
    assert run["partial"] and all(f["partial"] for f in run["findings"]) and run["findings"]
    assert "its findings are partial" in err and "rec.analyze(step_fn, *example_args)" in err
    rf.write_records(str(tmp_path / "traced"), rf.dqn_records(leaky=True))
    code, doc, err = _doctor(tmp_path / "traced")
    assert not doc["runs"][0]["partial"] and "partial" not in err


# ----- fix texts in the framework's words ---------------------------------------------------------


def _never_synced(source: str) -> RunLogs:
    graph = fmt.FlowGraph(
        losses=[fmt.LossInfo("td")],
        scopes=["online", "target"],
        cells={"td": {"online": fmt.UPDATES, "target": fmt.INDEPENDENT}},
        source=source,
    )
    event = fmt.Event(
        type=fmt.ANOMALY,
        name=anomalies.NEVER_SYNCED,
        step=5,
        message="target never synced",
        pair="target<-online",
        scope="target",
        evidence={"drift": 1.2},
    )
    return run_of_rows([(0, graph)], {5: {"td": {"online": _row()}}}, events=[event])


def test_never_synced_fix_is_an_assign_op_in_tf1_and_set_weights_in_keras():
    (tf1,) = [f for f in diagnose(_never_synced("tf1")) if f.kind == F.PAIR_ANOMALY]
    assert "assign" in tf1.fix and "sess.run" in tf1.fix and "set_weights" not in tf1.fix
    (tf2,) = [f for f in diagnose(_never_synced("tf2")) if f.kind == F.PAIR_ANOMALY]
    assert "set_weights" in tf2.fix


def _target_run(run_dir, source: str, target_state: str) -> None:
    """A critic loss reading a trainable target critic in `target_state`,
    traced from `source`, written as event files."""
    graph = dataclasses.replace(target_graph(target_state), source=source)
    if target_state == fmt.UPDATES:  # the critic's optimizer writes the target too
        graph = dataclasses.replace(graph, applied=list(graph.scopes))
    grads = {s: {"critic": {scope: _row() for scope in graph.scopes}} for s in range(4)}
    _write(run_dir, graph, grads)


@pytest.mark.parametrize(
    ("target_state", "kind"),
    [(fmt.IGNORED, F.TARGET_NOT_CUT), (fmt.UPDATES, F.TARGET_TRAINED)],
)
def test_target_fixes_speak_the_session_in_tf1_and_the_tape_in_tf2(tmp_path, target_state, kind):
    """TF1 graph code has no GradientTape: keeping a target out of the gradient
    is a stop_gradient or a sess.run of its own, and what trains every
    trainable variable is a minimize without var_list."""
    _target_run(tmp_path / "tf1" / "r", "tf1", target_state)
    _target_run(tmp_path / "tf2" / "r", "tf2", target_state)
    (tf1,) = _doctor(tmp_path / "tf1", "--strict")[1]["runs"][0]["findings"]
    (tf2,) = _doctor(tmp_path / "tf2", "--strict")[1]["runs"][0]["findings"]
    assert tf1["kind"] == tf2["kind"] == kind
    assert "sess.run" in tf1["fix"] and "tf.stop_gradient" in tf1["fix"]
    assert "tape" not in tf1["fix"] + tf1["why"]
    assert "tape opens" in tf2["fix"] and "sess.run" not in tf2["fix"] + tf2["why"]
    if kind == F.TARGET_NOT_CUT:
        assert "minimize" in tf1["why"] and "tape.gradient" in tf2["why"]
