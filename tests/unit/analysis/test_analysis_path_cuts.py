"""Cuts are per path: a stop_gradient on one of several paths from a loss to a
scope is a blocked edge with its source line, and the open path beside it.

SimSiam's symmetric loss reads the encoder twice: through the predictor, and
through tf.stop_gradient. The encoder still gets gradient (by the predictor),
so its cell stays `updates`, but the direct edge is cut for the loss."""

from __future__ import annotations

import pathlib

import keras
import pytest
import tensorflow as tf

from tb_gradscope import format as fmt
from tb_gradscope import testing
from tb_gradscope.format.flowgraph import CAUSE_STOP_GRADIENT


def _line_of(marker: str) -> int:
    return next(
        i
        for i, line in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1)
        if line.rstrip().endswith(marker)
    )


def _mlp(name: str, inputs: int, outputs: int) -> keras.Model:
    return keras.Sequential(
        [
            keras.Input((inputs,)),
            keras.layers.Dense(4, activation="tanh", name="l1"),
            keras.layers.Dense(outputs, name="l2"),
        ],
        name=name,
    )


def _cosine(p, z):
    return -tf.reduce_mean(
        tf.reduce_sum(tf.math.l2_normalize(p, 1) * tf.math.l2_normalize(z, 1), 1)
    )


def _simsiam_flow(cut: bool, symmetric: bool = True) -> fmt.FlowGraph:
    keras.utils.set_random_seed(4)
    enc, pred = _mlp("enc", 3, 3), _mlp("pred", 3, 3)
    opt = keras.optimizers.SGD(0.1)
    target = tf.stop_gradient if cut else (lambda t: t)

    def step(x1, x2):
        with tf.GradientTape() as tape:
            z1, z2 = enc(x1), enc(x2)
            loss = _cosine(pred(z1), target(z2))  # simsiam: the cut
            if symmetric:
                loss = 0.5 * loss + 0.5 * _cosine(pred(z2), target(z1))
        variables = enc.trainable_variables + pred.trainable_variables
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return {"simsiam": loss}

    x = tf.zeros((8, 3))
    return testing.trace_flow(step, x, x, models={"enc": enc, "pred": pred})


@pytest.fixture(scope="module")
def simsiam():
    return _simsiam_flow(cut=True)


@pytest.fixture(scope="module")
def simsiam_without_cut():
    return _simsiam_flow(cut=False)


def _path_cuts(flow: fmt.FlowGraph) -> list[fmt.BlockedEdge]:
    return [e for e in flow.blocked_edges if e.loss == "simsiam" and e.open_path]


def test_symmetric_loss_cut_on_one_path_is_a_blocked_edge_with_its_source_line(simsiam):
    edges = _path_cuts(simsiam)
    assert edges, simsiam.blocked_edges
    for edge in edges:
        assert edge.producer_scope.startswith("enc") and edge.consumer_scope == "loss:simsiam"
        assert edge.cause == CAUSE_STOP_GRADIENT and edge.op_type == "StopGradient"
        assert edge.source is not None and edge.source.file.endswith("test_analysis_path_cuts.py")
    assert _line_of("# simsiam: the cut") in {e.source.line for e in edges}


def test_the_open_path_is_shown_beside_the_cut(simsiam):
    for edge in _path_cuts(simsiam):
        assert edge.open_path[0] == edge.producer_scope
        assert edge.open_path[-1] == "loss:simsiam"
        assert any(node.startswith("pred") for node in edge.open_path[1:-1]), edge.open_path


def test_encoder_still_updates_the_cut_is_extra_evidence(simsiam):
    assert simsiam.cells["simsiam"]["enc"] == fmt.UPDATES
    assert simsiam.cells["simsiam"]["pred"] == fmt.UPDATES
    assert simsiam.path_cuts


def test_the_cut_edge_is_drawn_blocked_for_the_loss(simsiam):
    cut = {(e.src, e.dst) for e in simsiam.edges if "simsiam" in e.blocked_for}
    assert cut and all(src.startswith("enc") and dst == "loss:simsiam" for src, dst in cut)
    assert any(
        e.src.startswith("pred") and e.dst == "loss:simsiam" and not e.blocked_for
        for e in simsiam.edges
    )


def test_without_stop_gradient_the_flowgraph_differs(simsiam, simsiam_without_cut):
    assert _path_cuts(simsiam_without_cut) == []
    assert not any(e.blocked_for for e in simsiam_without_cut.edges)
    assert simsiam_without_cut.cells == simsiam.cells


def test_one_sided_loss_has_the_same_per_path_cut():
    flow = _simsiam_flow(cut=True, symmetric=False)
    edges = _path_cuts(flow)
    assert edges and {e.consumer_scope for e in edges} == {"loss:simsiam"}
    assert flow.cells["simsiam"]["enc"] == fmt.UPDATES


def test_stop_gradient_inside_a_layer_is_not_a_path_cut():
    """tf.nn.moments (BatchNormalization) stops the gradient of the mean inside
    the layer: no scope-graph edge is cut, nothing to report."""
    keras.utils.set_random_seed(5)
    net = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(4, name="l1"),
            keras.layers.BatchNormalization(name="bn"),
            keras.layers.Dense(1, name="l2"),
        ],
        name="net",
    )

    def step(x):
        return {"mse": tf.reduce_mean(tf.square(net(x, training=True)))}

    flow = testing.trace_flow(step, tf.zeros((8, 3)), models={"net": net})
    assert [e for e in flow.blocked_edges if e.open_path] == []
    assert not any(e.blocked_for for e in flow.edges)


def test_old_documents_read_without_per_path_fields(simsiam):
    doc = simsiam.to_json()
    doc.pop("path_cuts")
    for edge in doc["blocked_edges"]:
        edge.pop("open_path")
    old = fmt.FlowGraph.from_json(doc)
    assert old.path_cuts is False
    assert all(e.open_path == () for e in old.blocked_edges)
    assert fmt.FlowGraph.from_json(simsiam.to_json()) == simsiam


def test_a_malformed_open_path_is_a_format_error(simsiam):
    doc = simsiam.to_json()
    doc["blocked_edges"][0]["open_path"] = "enc -> pred"
    with pytest.raises(fmt.FormatError, match="open_path"):
        fmt.FlowGraph.from_json(doc)
