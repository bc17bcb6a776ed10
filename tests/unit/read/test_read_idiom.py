"""Fixes speak the framework that traced the run: a PyTorch run is never told to
add a tf.stop_gradient or a var_list, a TF run keeps its words."""

from __future__ import annotations

import pytest

from tb_gradscope import format as fmt
from tb_gradscope.format import flowgraph as fg
from tb_gradscope.read import anomalies, idiom
from tb_gradscope.read.evidence import blocked_edge_dict, blocked_fix, blocked_text
from tb_gradscope.read.health import anomaly_fix

TF_WORDS = ("tf.", "var_list", "tape", "trainable=False", "Keras", "sess.run")


def _edge(cause: str) -> fmt.BlockedEdge:
    return fmt.BlockedEdge(
        loss="td",
        producer="target/l1",
        consumer="loss:td",
        op_name="detach",
        op_type="detach",
        cause=cause,
        producer_scope="target/l1",
        consumer_scope="loss:td",
        source=fmt.SourceLine("train.py", 7, "step"),
    )


def test_the_idiom_of_a_source():
    assert idiom.idiom("torch") is idiom.TORCH
    assert idiom.idiom("tf1") is idiom.TF1
    assert idiom.idiom("tf2") is idiom.idiom("keras") is idiom.idiom("") is idiom.TF2


@pytest.mark.parametrize("cause", fg.CAUSES)
def test_every_blocked_edge_fix_of_a_torch_run_speaks_pytorch(cause):
    fix = blocked_fix(blocked_edge_dict(_edge(cause)), "torch")
    assert not [w for w in TF_WORDS if w in fix], fix
    assert "train.py:7" in fix or cause == fg.CAUSE_TAPE_BOUNDARY  # a read, not a call


def test_a_detach_cut_of_a_torch_run_says_remove_the_detach():
    text = blocked_text(_edge(fg.CAUSE_STOP_GRADIENT), "torch")
    assert (
        "remove the .detach() (or the torch.no_grad() block) at train.py:7 in step" in text["fix"]
    )


def test_a_tf_run_keeps_its_words():
    assert "remove the tf.stop_gradient" in blocked_fix(
        blocked_edge_dict(_edge(fg.CAUSE_STOP_GRADIENT)), "tf2"
    )
    assert "var_list" in anomaly_fix(anomalies.MOVED_BY_OPTIMIZER, "tf2")


@pytest.mark.parametrize(
    "name",
    [
        anomalies.NEVER_SYNCED,
        anomalies.TARGET_FROZEN,
        anomalies.MOVED_BY_OPTIMIZER,
        anomalies.MOVING_STATS_NOT_TRACKED,
    ],
)
def test_pair_anomaly_fixes_of_a_torch_run_speak_pytorch(name):
    fix = anomaly_fix(name, "torch")
    assert not [w for w in TF_WORDS if w in fix], fix
    assert any(w in fix for w in ("state_dict", "param groups", "torch.no_grad()")), fix


def test_torch_idiom_has_no_tensorflow_words():
    for field, text in vars(idiom.TORCH).items():
        assert not [w for w in TF_WORDS if w in text], (field, text)
