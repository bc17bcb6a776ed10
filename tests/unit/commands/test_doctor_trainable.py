"""Which scopes are trainable, and what `doctor` concludes from it.

The FlowGraph records per scope whether its variables are trainable (TF2
`Variable.trainable`, TF1 membership in TRAINABLE_VARIABLES); logs written
before the field read as "not known". With it, a trainable target reached by
an uncut gradient is a finding (DDPG's backup computed inside the critic
tape), a trainable=False target reached so is not (the TF1 idiom). Losses
fighting are judged over the whole region both update, not layer by layer.
"""

from __future__ import annotations

import numpy as np
import pytest

from tb_gradscope import format as fmt
from tb_gradscope.format.flowgraph import MIXED, NODE_LOSS, NODE_SCOPE, NOT_TRAINABLE, TRAINABLE
from tb_gradscope.format.metadata import FormatError
from tb_gradscope.read import finding as F
from tb_gradscope.read.findings import diagnose
from tb_gradscope.read.runs import RunLogs
from tests.support.run_logs import run_of_rows

# ----- the FlowGraph field -------------------------------------------------------------


def test_flowgraph_records_trainable_frozen_and_mixed_scopes():
    import keras
    import tensorflow as tf

    from tb_gradscope.analysis import analyze_function

    net = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(2, name="l1"),
            keras.layers.BatchNormalization(name="bn"),
            keras.layers.Dense(1, name="frozen", trainable=False),
        ],
        name="net",
    )

    def step(x):
        with tf.GradientTape():
            loss = tf.reduce_mean(net(x, training=True))
        return {"mse": loss}

    graph = analyze_function(
        step,
        tf.ones((4, 3)),
        variable_scopes=[(v, "net/" + v.path.split("/")[-2]) for v in net.variables],
    )
    assert graph.trainable == {
        "net": MIXED,
        "net/l1": TRAINABLE,
        "net/bn": MIXED,
        "net/frozen": NOT_TRAINABLE,
    }


def test_tf1_trainability_is_membership_in_the_trainable_collection():
    import tensorflow as tf

    from tb_gradscope.analysis import analyze_graph

    graph = tf.Graph()
    with graph.as_default():
        with tf.compat.v1.variable_scope("net"):
            w = tf.compat.v1.get_variable("w", [2])
            removed = tf.compat.v1.get_variable("removed", [2])  # created trainable, then taken out
        graph.get_collection_ref(tf.compat.v1.GraphKeys.TRAINABLE_VARIABLES).remove(removed)
        flow = analyze_graph(
            graph, {"l": tf.reduce_sum(w * removed)}, [(w, "net/a"), (removed, "net/b")]
        )
    assert flow.trainable == {"net": MIXED, "net/a": TRAINABLE, "net/b": NOT_TRAINABLE}


def test_a_flowgraph_without_the_field_reads_as_not_known():
    doc = _graph().to_json()
    del doc["trainable"]
    graph = fmt.FlowGraph.from_json(doc)
    assert graph.trainable is None and graph.trainability("critic/l1") is None


def test_an_unknown_trainability_is_a_format_error_naming_the_field():
    doc = _graph().to_json()
    doc["trainable"]["critic/l1"] = "sometimes"
    with pytest.raises(FormatError, match="trainable"):
        fmt.FlowGraph.from_json(doc)
    doc["trainable"] = ["critic"]
    with pytest.raises(FormatError, match="trainable"):
        fmt.FlowGraph.from_json(doc)


# ----- a target reached by an uncut gradient ----------------------------------------------

SCOPES = ["critic", "critic/l1", "target_critic", "target_critic/l1"]


def _graph(target_state: str = fmt.IGNORED, trainable: str | None = TRAINABLE) -> fmt.FlowGraph:
    """A critic whose loss reads a target critic (found by name) in state `target_state`."""
    cells = {
        "critic": {
            "critic": fmt.UPDATES,
            "critic/l1": fmt.UPDATES,
            "target_critic": target_state,
            "target_critic/l1": target_state,
        }
    }
    blocked = ("critic",) if target_state == fmt.BLOCKED else ()
    return fmt.FlowGraph(
        losses=[fmt.LossInfo("critic", optimizer="opt0")],
        scopes=SCOPES,
        cells=cells,
        nodes=[
            fmt.GraphNode("critic/l1", NODE_SCOPE, "critic/l1"),
            fmt.GraphNode("target_critic/l1", NODE_SCOPE, "target_critic/l1"),
            fmt.GraphNode("loss:critic", NODE_LOSS, "critic"),
        ],
        edges=[
            fmt.GraphEdge("critic/l1", "loss:critic", 1),
            fmt.GraphEdge("target_critic/l1", "loss:critic", 1, blocked),
        ],
        applied=["critic", "critic/l1"],
        trainable=None
        if trainable is None
        else {
            "critic": TRAINABLE,
            "critic/l1": TRAINABLE,
            "target_critic": trainable,
            "target_critic/l1": trainable,
        },
    )


def _row(l2: float = 1.0) -> dict:
    return {"grad_vars": 2.0, "l2": l2, "max_abs": l2, "nonfinite": 0.0, "zero_frac": 0.0}


def _records(graph: fmt.FlowGraph, steps: int = 4) -> RunLogs:
    grads = {s: {"critic": {"critic": _row(), "critic/l1": _row()}} for s in range(steps)}
    return run_of_rows([(0, graph)], grads)


def test_trainable_target_reached_by_an_uncut_gradient_is_target_not_cut():
    (f,) = diagnose(_records(_graph()))
    assert (f.kind, f.loss, f.scope, f.rule) == (
        F.TARGET_NOT_CUT,
        "critic",
        "target_critic",
        "blocked(critic, target_critic/*)",
    )
    assert (f.first_step, f.last_step, f.steps) == (0, 3, 4)
    assert f.edge == "target_critic/l1 -> loss:critic"
    assert "stop_gradient" in f.fix and "trainable=False" in f.fix
    assert f.evidence["targets"] == ["target_critic"] and f.evidence["online"] == ["critic"]


def test_a_target_created_trainable_false_reached_so_is_no_finding():
    assert diagnose(_records(_graph(trainable=NOT_TRAINABLE))) == []


def test_a_log_that_does_not_say_what_is_trainable_gives_no_target_not_cut():
    assert diagnose(_records(_graph(trainable=None))) == []


def test_a_cut_target_is_no_finding():
    assert diagnose(_records(_graph(fmt.BLOCKED))) == []


# ----- losses fighting: over the region both update -----------------------------------------

NET = ["net", "net/trunk", "net/trunk/l1", "net/trunk/bn", "net/head_a", "net/head_b"]
HOLDERS = ["net/trunk/l1", "net/trunk/bn", "net/head_a", "net/head_b"]


def _two_heads(cosines: dict[str, list[float]]) -> RunLogs:
    """Losses a and b share net/trunk (l1 and bn), each with its own head; `cosines` per scope by step."""
    own = {"a": "net/head_a", "b": "net/head_b"}
    cells = {
        loss: {
            s: (
                fmt.UPDATES
                if s in ("net", "net/trunk", "net/trunk/l1", "net/trunk/bn", head)
                else fmt.INDEPENDENT
            )
            for s in NET
        }
        for loss, head in own.items()
    }
    graph = fmt.FlowGraph(
        losses=[fmt.LossInfo("a", optimizer="opt0"), fmt.LossInfo("b", optimizer="opt0")],
        scopes=NET,
        cells=cells,
        nodes=[fmt.GraphNode(h, NODE_SCOPE, h) for h in HOLDERS],
        edges=[
            fmt.GraphEdge("net/trunk/l1", "net/trunk/bn", 1),
            fmt.GraphEdge("net/trunk/bn", "net/head_a", 1),
            fmt.GraphEdge("net/trunk/bn", "net/head_b", 1),
            fmt.GraphEdge("net/head_a", "loss:a", 1),
            fmt.GraphEdge("net/head_b", "loss:b", 1),
        ],
        applied=NET,
        trainable={s: MIXED if "bn" in s or s in ("net", "net/trunk") else TRAINABLE for s in NET},
    )
    steps = len(next(iter(cosines.values())))
    grads = {
        s: {loss: {h: _row() for h in NET if cells[loss][h] == fmt.UPDATES} for loss in own}
        for s in range(steps)
    }
    conflict = {
        ("a", "b"): [
            (s, {scope: values[s] for scope, values in cosines.items()}) for s in range(steps)
        ]
    }
    return run_of_rows([(0, graph)], grads, conflict)


def test_losses_opposed_on_one_layer_of_a_trunk_they_agree_on_are_not_fighting():
    records = _two_heads(
        {
            "net/trunk": [0.3, 0.2, 0.4, 0.1],
            "net/trunk/bn": [-0.9, -0.8, -0.95, -0.9],
            "net/trunk/l1": [0.5, 0.4, 0.6, 0.3],
        }
    )
    assert diagnose(records) == []


def test_losses_opposed_over_their_whole_shared_trunk_are_fighting():
    records = _two_heads(
        {
            "net/trunk": [-0.3, -0.7, -0.9, -0.6],
            "net/trunk/bn": [-0.9, -0.8, -0.95, -0.9],
            "net/trunk/l1": [-0.2, -0.6, -0.8, -0.6],
        }
    )
    (f,) = diagnose(records)
    assert (f.kind, f.loss, f.scope) == (F.LOSSES_FIGHTING, "b", "net/trunk")
    assert (f.steps, f.first_step, f.last_step) == (3, 1, 3)


# ----- a correct conv + BatchNorm model with an EMA twin and two losses -------------------


def _train_bn_twin(logdir: str, steps: int = 6) -> None:
    """Three conv+BatchNorm layers ("online") and an EMA twin copied from it
    ("target", every weight averaged, moving statistics included), a head and a
    predictor, two losses (cls, and byol regressed onto the cut target), on
    random inputs far from BatchNorm's initial statistics (mean 50, std 100):
    the moving statistics move fast while the twin follows at tau."""
    import keras

    from tb_gradscope.pairs import pair_models
    from tb_gradscope.record import Recorder
    from tests.support.byol_step import byol_step

    def net(name):
        x = keras.Input((8, 8, 3))
        h = x
        for i in range(3):
            h = keras.layers.Conv2D(8, 3, padding="same", name=f"conv{i}")(h)
            h = keras.layers.ReLU()(keras.layers.BatchNormalization(name=f"bn{i}")(h))
        return keras.Model(x, keras.layers.GlobalAveragePooling2D()(h), name=name)

    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    online, target = net("online"), net("target")
    target.set_weights(online.get_weights())
    head = keras.Sequential([keras.Input((8,)), keras.layers.Dense(4, name="logits")], name="head")
    predictor = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dense(8, name="out")], name="predictor"
    )
    optimizer = keras.optimizers.SGD(0.01)
    rec = Recorder(
        logdir,
        every_n_steps=1,
        pairs=[pair_models(target, online, tau=0.01)],
        models={"online": online, "target": target, "head": head, "predictor": predictor},
    )
    train_step = byol_step(rec, online, target, head, predictor, optimizer, 0.01)

    for _ in range(steps):
        x = (rng.normal(size=(4, 8, 8, 3)) * 100 + 50).astype("float32")
        train_step(x, rng.integers(0, 4, 4).astype("int32"))
    rec.close()


@pytest.mark.slow
def test_a_correct_batchnorm_twin_with_two_losses_has_no_finding(tmp_path):
    from tb_gradscope.read.logdir import load_logdir
    from tests.unit.commands.test_doctor import _findings

    _train_bn_twin(str(tmp_path / "run"))
    (logs,) = load_logdir(str(tmp_path), "run")
    (series,) = logs.drift.values()
    first = series[0][1]
    # The whole twin is far from online at once (moving variances), its trainable weights are not.
    assert first.row("target")["drift"] > 0.5 and first.row("target/conv0")["drift"] < 0.05
    assert logs.flowgraphs[-1][1].trainability("online/bn0") == MIXED
    code, found, _ = _findings(tmp_path, "run")
    assert found == [] and code == 0, [(f["kind"], f["loss"], f["scope"], f["what"]) for f in found]
