"""The rule a blocked edge's fix proposes to pin the cut passes `check` on the
run it is proposed for (issue 57, items 5, 7 and 12): a per-path cut
(SimSiam) gets the `except_via` form, a straight-through estimator's cut no
rule at all, and no online scope is called "a target network"."""

from __future__ import annotations

from tb_gradscope import format as fmt
from tb_gradscope import rules
from tb_gradscope.format.flowgraph import NODE_LOSS, NODE_SCOPE
from tb_gradscope.read.evidence import blocked_text


def _graph(cells, edges, blocked_edges) -> fmt.FlowGraph:
    holders = sorted({n for e in edges for n in e[:2] if not n.startswith("loss:")})
    return fmt.FlowGraph(
        losses=[fmt.LossInfo(loss) for loss in cells],
        scopes=sorted({s for row in cells.values() for s in row}),
        cells=cells,
        nodes=[fmt.GraphNode(h, NODE_SCOPE, h) for h in holders]
        + [fmt.GraphNode(f"loss:{loss}", NODE_LOSS, loss) for loss in cells],
        edges=[fmt.GraphEdge(src, dst, 1, tuple(cut)) for src, dst, cut in edges],
        blocked_edges=blocked_edges,
        path_cuts=True,
    )


def _cut(loss, producer, consumer, open_path=()) -> fmt.BlockedEdge:
    return fmt.BlockedEdge(
        loss=loss,
        producer=f"{producer}/MatMul",
        consumer="StopGradient",
        op_name="StopGradient",
        op_type="StopGradient",
        cause="stop_gradient",
        producer_scope=producer,
        consumer_scope=consumer,
        source=fmt.SourceLine("train.py", 12, "step"),
        open_path=tuple(open_path),
    )


def _pinned(text: str) -> str:
    return text.split("pin it with ")[1].split(";")[0] if "pin it with " in text else ""


def test_a_simsiam_cut_is_pinned_with_except_via_and_the_pin_passes_check():
    edge = _cut("simsiam", "encoder", "loss:simsiam", ["encoder", "predictor", "loss:simsiam"])
    graph = _graph(
        {"simsiam": {"encoder": fmt.UPDATES, "predictor": fmt.UPDATES}},
        [
            ("encoder", "predictor", ()),
            ("predictor", "loss:simsiam", ()),
            ("encoder", "loss:simsiam", ("simsiam",)),
        ],
        [edge],
    )
    fix = blocked_text(edge, graph)["fix"]
    assert _pinned(fix) == "blocked(simsiam, encoder, except_via=predictor)", fix
    assert rules.check_flowgraph([rules.parse_rule(_pinned(fix))], graph) == []
    assert "target network" not in fix


def test_a_straight_through_cut_proposes_no_pin_rule_check_would_fail():
    """z + stop_gradient(q - z): the encoder's cut path and its open path
    both run through the decoder, so no rule pins the cut alone."""
    edge = _cut("recon", "encoder", "decoder", ["encoder", "decoder", "loss:recon"])
    graph = _graph(
        {"recon": {"encoder": fmt.UPDATES, "decoder": fmt.UPDATES, "vq": fmt.BLOCKED}},
        [
            ("encoder", "decoder", ("recon",)),
            ("vq", "decoder", ("recon",)),
            ("decoder", "loss:recon", ()),
        ],
        [edge],
    )
    fix = blocked_text(edge, graph)["fix"]
    assert "blocked(" not in fix, fix
    assert "straight-through" in fix or "another path" in fix


def test_a_whole_cut_is_pinned_plainly():
    edge = _cut("td", "target", "loss:td")
    graph = _graph(
        {"td": {"online": fmt.UPDATES, "target": fmt.BLOCKED}},
        [("online", "loss:td", ()), ("target", "loss:td", ("td",))],
        [edge],
    )
    fix = blocked_text(edge, graph)["fix"]
    assert _pinned(fix) == "blocked(td, target)"
    assert rules.check_flowgraph([rules.parse_rule(_pinned(fix))], graph) == []


def test_tape_boundary_cuts_of_one_loss_are_one_line_in_report():
    """A BYOL teacher run before the tape opens: one cut per layer, none with a
    source line (27 lines on a small BYOL, issue 57 item 12), grouped."""
    from tb_gradscope.commands.report import blocked_lines
    from tb_gradscope.read.evidence import blocked_edge_dict

    edges = [
        fmt.BlockedEdge(
            loss="byol",
            producer=f"target/l{i}/MatMul",
            consumer="sub",
            op_name="sub",
            op_type="Sub",
            cause="tape_boundary",
            producer_scope=f"target/l{i}",
            consumer_scope="loss:byol",
        )
        for i in range(1, 6)
    ] + [_cut("byol", "online/l1", "loss:byol")]
    lines = blocked_lines([blocked_edge_dict(e) for e in edges])
    text = "\n".join(lines)
    assert text.count("(no user source line)") == 1, text
    assert "5 scopes" in text and "target/l1" in text and "target/l5" in text
    assert "StopGradient" in text  # the other cut keeps its own line


def test_tape_boundary_cuts_at_one_call_line_are_one_line_pointing_at_it():
    from tb_gradscope.commands.report import blocked_lines
    from tb_gradscope.read.evidence import blocked_edge_dict

    edges = [
        fmt.BlockedEdge(
            loss="byol",
            producer=f"target/l{i}/kernel",
            consumer="loss",
            op_name="GradientTape",
            op_type="GradientTape",
            cause="tape_boundary",
            producer_scope=f"target/l{i}",
            consumer_scope="loss:byol",
            source=fmt.SourceLine("train.py", 30, "step"),
        )
        for i in range(1, 4)
    ]
    (line,) = blocked_lines([blocked_edge_dict(e) for e in edges])
    assert "3 scopes" in line and "at train.py:30 in step (where the network was called)" in line
