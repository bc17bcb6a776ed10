"""doctor never advises breaking a standard design, and the measurement
outranks the FlowGraph (issue 57: distillation, commitment losses,
baselines; measured gradients against the static analysis).

Hand-built runs: each holds exactly the evidence the issue's loop recorded."""

from __future__ import annotations

from tb_gradscope import format as fmt
from tb_gradscope.format.flowgraph import NODE_SCOPE, TRAINABLE
from tb_gradscope.read import finding as F
from tb_gradscope.read.findings import diagnose
from tests.support.run_logs import run_of_rows

STEPS = 4


def _row(l2: float = 0.5) -> dict:
    return {"grad_vars": 2.0, "l2": l2, "max_abs": l2 / 2, "nonfinite": 0.0, "zero_frac": 0.0}


def _run(updated: dict[str, list[str]], cosines: dict[str, list[float]], graph=None):
    """Losses updating holders (measured, every step), with their pair's cosines per scope."""
    grads = {
        s: {loss: {h: _row() for h in hs} for loss, hs in updated.items()} for s in range(STEPS)
    }
    a, b = list(updated)
    conflict = {
        (a, b): [(s, {scope: values[s] for scope, values in cosines.items()}) for s in range(STEPS)]
    }
    return run_of_rows([(0, graph)] if graph else [], grads, conflict)


def _graph(
    cells: dict[str, dict[str, str]], edges: list[tuple[str, str]], blocked=()
) -> fmt.FlowGraph:
    scopes = sorted({s for row in cells.values() for s in row})
    holders = sorted({e for pair in edges for e in pair if not e.startswith("loss:")})
    return fmt.FlowGraph(
        losses=[fmt.LossInfo(loss, optimizer="opt0") for loss in cells],
        scopes=scopes,
        cells=cells,
        nodes=[fmt.GraphNode(h, NODE_SCOPE, h) for h in holders],
        edges=[
            fmt.GraphEdge(src, dst, 1, tuple(loss for loss in cells if (src, dst, loss) in blocked))
            for src, dst in edges
        ],
        applied=scopes,
        trainable={s: TRAINABLE for s in scopes},
    )


FIGHT = [-0.9, -0.8, -0.95, -0.7]


def test_a_commitment_loss_pulling_against_reconstruction_on_the_encoder_is_no_finding():
    """VQ-VAE: the commitment term trains only the encoder (its purpose), the
    reconstruction trains it and the decoder; opposed on the encoder, by design."""
    run = _run({"recon": ["encoder", "decoder"], "commit": ["encoder"]}, {"encoder": FIGHT})
    assert [(f.kind, f.loss, f.rule) for f in diagnose(run)] == []


def test_distillation_and_the_task_loss_opposed_on_the_student_is_no_finding():
    run = _run({"task": ["student"], "distill": ["student"]}, {"student": FIGHT})
    assert diagnose(run) == []


def test_an_eager_actor_whose_advantage_trains_v_is_named_and_the_critic_never_blamed():
    """Shared-trunk actor-critic, no FlowGraph, heads `pi` and `v`: the actor's
    gradient reaches `v` and the two losses pull `v` apart. The finding is the
    actor's, on `v`; no rule forbids the critic its own head."""
    run = _run(
        {"actor": ["ac/trunk", "ac/pi", "ac/v"], "critic": ["ac/trunk", "ac/v"]},
        {"ac/v": FIGHT, "ac/trunk": [0.2, 0.1, 0.3, 0.2]},
    )
    found = diagnose(run)
    assert [(f.kind, f.loss, f.scope) for f in found] == [(F.VALUE_NOT_CUT, "actor", "ac/v")]
    assert all(not f.rule.startswith("never(critic") for f in found)


def test_a_gradient_measured_where_the_flowgraph_says_cut_is_reported_and_wins():
    """rec.analyze traced a copy whose advantage is cut; the loop's is not."""
    cells = {
        "actor": {
            "ac": fmt.UPDATES,
            "ac/trunk": fmt.UPDATES,
            "ac/pi": fmt.UPDATES,
            "ac/v": fmt.BLOCKED,
        },
        "critic": {
            "ac": fmt.UPDATES,
            "ac/trunk": fmt.UPDATES,
            "ac/pi": fmt.INDEPENDENT,
            "ac/v": fmt.UPDATES,
        },
    }
    graph = _graph(
        cells,
        [
            ("ac/trunk", "ac/pi"),
            ("ac/trunk", "ac/v"),
            ("ac/pi", "loss:actor"),
            ("ac/v", "loss:actor"),
            ("ac/v", "loss:critic"),
        ],
        blocked={("ac/v", "loss:actor", "actor")},
    )
    run = _run(
        {"actor": ["ac/trunk", "ac/pi", "ac/v"], "critic": ["ac/trunk", "ac/v"]},
        {"ac/trunk": [0.2, 0.1, 0.3, 0.2]},
        graph,
    )
    (f,) = diagnose(run)
    assert (f.kind, f.loss, f.scope, f.severity) == (
        F.FLOWGRAPH_CONTRADICTED,
        "actor",
        "ac/v",
        F.LEAK,
    )
    assert f.evidence["flowgraph_state"] == [fmt.BLOCKED] and f.steps == STEPS
    assert f.rule == "blocked(actor, ac/v/*)"


def _vq(commit_cut: bool):
    """A vector quantizer: codebook = |sg(z) - q|^2, commit = |z - q|^2 with or without sg(q)."""
    commit_vq = fmt.BLOCKED if commit_cut else fmt.UPDATES
    cells = {
        "recon": {"encoder": fmt.UPDATES, "decoder": fmt.UPDATES, "vq": fmt.BLOCKED},
        "codebook": {"encoder": fmt.BLOCKED, "decoder": fmt.INDEPENDENT, "vq": fmt.UPDATES},
        "commit": {"encoder": fmt.UPDATES, "decoder": fmt.INDEPENDENT, "vq": commit_vq},
    }
    blocked = {
        ("encoder", "loss:codebook", "codebook"),
        ("vq", "loss:recon", "recon"),
    } | ({("vq", "loss:commit", "commit")} if commit_cut else set())
    graph = _graph(
        cells,
        [
            ("encoder", "decoder"),
            ("decoder", "loss:recon"),
            ("vq", "loss:recon"),
            ("encoder", "loss:codebook"),
            ("vq", "loss:codebook"),
            ("encoder", "loss:commit"),
            ("vq", "loss:commit"),
        ],
        blocked,
    )
    updated = {
        loss: [s for s, st in row.items() if st == fmt.UPDATES] for loss, row in cells.items()
    }
    grads = {
        s: {loss: {h: _row() for h in hs} for loss, hs in updated.items()} for s in range(STEPS)
    }
    conflict = {("recon", "commit"): [(s, {"encoder": FIGHT[s]}) for s in range(STEPS)]}
    if not commit_cut:
        conflict[("codebook", "commit")] = [(s, {"vq": 1.0}) for s in range(STEPS)]
    return run_of_rows([(0, graph)], grads, conflict)


def test_a_commitment_loss_that_trains_the_codebook_is_named_with_a_rule_the_fix_keeps():
    assert diagnose(_vq(commit_cut=True)) == []
    (f,) = diagnose(_vq(commit_cut=False))
    assert (f.kind, f.loss, f.scope, f.severity) == (F.VALUE_NOT_CUT, "commit", "vq", F.LEAK)
    assert f.evidence["other_loss"] == "codebook" and "stop_gradient" in f.fix
    assert f.rule == "blocked(commit, vq/*)"
    from tb_gradscope import rules

    fixed = _vq(commit_cut=True).flowgraph
    assert rules.check_flowgraph([rules.parse_rule(f.rule)], fixed) == []


def _simsiam(cut: bool):
    cells = {
        "simsiam": {"encoder": fmt.UPDATES, "encoder/l1": fmt.UPDATES, "predictor": fmt.UPDATES}
    }
    graph = _graph(
        cells,
        [
            ("encoder/l1", "predictor"),
            ("predictor", "loss:simsiam"),
            ("encoder/l1", "loss:simsiam"),
        ],
        {("encoder/l1", "loss:simsiam", "simsiam")} if cut else set(),
    )
    if cut:
        graph.blocked_edges.append(
            fmt.BlockedEdge(
                loss="simsiam",
                producer="encoder/l1/MatMul",
                consumer="StopGradient",
                op_name="StopGradient",
                op_type="StopGradient",
                cause="stop_gradient",
                producer_scope="encoder/l1",
                consumer_scope="loss:simsiam",
                open_path=("encoder/l1", "predictor", "loss:simsiam"),
            )
        )
    grads = {s: {"simsiam": {"encoder/l1": _row(), "predictor": _row()}} for s in range(STEPS)}
    return run_of_rows([(0, graph)], grads)


def test_simsiam_without_its_stop_gradient_is_a_question_with_the_except_via_rule():
    assert diagnose(_simsiam(cut=True)) == []
    (f,) = diagnose(_simsiam(cut=False))
    assert (f.kind, f.loss, f.scope, f.severity) == (
        F.PREDICTOR_BYPASSED,
        "simsiam",
        "encoder",
        F.QUESTION,
    )
    assert f.rule == "blocked(simsiam, encoder/*, except_via=predictor)"


def test_doctor_exits_0_on_a_question_and_1_with_strict(monkeypatch):
    import argparse
    import io

    from tb_gradscope.commands import doctor
    from tb_gradscope.read import logdir

    run = _simsiam(cut=False)
    monkeypatch.setattr(logdir, "load_logdir", lambda *_: [run])
    for strict, want in ((False, 0), (True, 1)):
        out, err = io.StringIO(), io.StringIO()
        args = argparse.Namespace(logdir="x", run_name=None, format="text", strict=strict)
        assert doctor.run(args, out, err) == want, err.getvalue()
        assert "question: loss 'simsiam' trains 'encoder'" in out.getvalue()


def test_a_rule_forbidding_a_critic_its_own_head_or_a_student_its_teacher_is_never_shown():
    """The last check before a finding is shown: a rule that would break the
    design it is about becomes a question without a rule."""
    import dataclasses

    from tb_gradscope.read.findings import _vetted
    from tb_gradscope.read.flow import Flow
    from tb_gradscope.read.targets import Target

    run = _run({"actor": ["ac/trunk", "ac/pi"], "critic": ["ac/trunk", "ac/v"]}, {})
    flow = Flow(run)
    base = diagnose(_vq(commit_cut=False))[0]
    blame_critic = dataclasses.replace(
        base, loss="critic", scope="ac/v", rule="never(critic, ac/v/*)"
    )
    (vetted,) = _vetted([blame_critic], flow, [])
    assert (vetted.severity, vetted.rule) == (F.QUESTION, "")

    run = _run({"task": ["student"], "distill": ["student", "teacher"]}, {})
    flow = Flow(run, ["teacher"])
    cut_student = dataclasses.replace(
        base, loss="distill", scope="student", rule="blocked(distill, student/*)"
    )
    (vetted,) = _vetted([cut_student], flow, [Target("teacher", "student")])
    assert (vetted.severity, vetted.rule) == (F.QUESTION, "")
    keep = dataclasses.replace(
        base, loss="distill", scope="teacher", rule="never(distill, teacher/*)"
    )
    assert _vetted([keep], flow, [Target("teacher", "student")]) == [keep]


def _multitask(head_b_trainable: bool, head_b_moves: float = 0.0):
    """task_b's gradient reaches head_b, which no optimizer step writes."""
    from tb_gradscope.format.flowgraph import NOT_TRAINABLE
    from tests.support.run_logs import _table

    cells = {
        "task_a": {
            "net": fmt.UPDATES,
            "net/trunk": fmt.UPDATES,
            "net/head_a": fmt.UPDATES,
            "net/head_b": fmt.INDEPENDENT,
        },
        "task_b": {
            "net": fmt.UPDATES,
            "net/trunk": fmt.UPDATES,
            "net/head_a": fmt.INDEPENDENT,
            "net/head_b": fmt.IGNORED,
        },
    }
    graph = _graph(
        cells,
        [
            ("net/trunk", "net/head_a"),
            ("net/trunk", "net/head_b"),
            ("net/head_a", "loss:task_a"),
            ("net/head_b", "loss:task_b"),
        ],
    )
    graph.applied = ["net", "net/trunk", "net/head_a"]
    if not head_b_trainable:
        graph.trainable["net/head_b"] = NOT_TRAINABLE
    grads = {
        s: {
            "task_a": {"net/trunk": _row(), "net/head_a": _row()},
            "task_b": {"net/trunk": _row(), "net/head_b": _row()},
        }
        for s in range(STEPS)
    }
    run = run_of_rows([(0, graph)], grads)
    moves = {"net/trunk": 0.1, "net/head_a": 0.1, "net/head_b": head_b_moves}
    run.updates = {
        s: _table(
            fmt.Kind.UPDATE_STATS,
            "",
            {k: {"update_norm": v, "weight_norm": 1.0} for k, v in moves.items()},
        )
        for s in range(STEPS)
    }
    return run


def test_a_head_no_optimizer_writes_and_that_never_moves_never_trains():
    (f,) = diagnose(_multitask(head_b_trainable=True))
    assert (f.kind, f.loss, f.scope, f.severity) == (
        F.NEVER_TRAINED,
        "task_b",
        "net/head_b",
        F.LEAK,
    )
    assert f.rule == "updates(task_b, net/head_b/*)" and "var_list" in f.fix


def test_a_frozen_layer_or_one_that_moves_is_not_never_trained():
    assert diagnose(_multitask(head_b_trainable=False)) == []
    assert diagnose(_multitask(head_b_trainable=True, head_b_moves=0.05)) == []
