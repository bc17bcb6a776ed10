"""TF1 under `disable_v2_behavior()` (reference variables): the recorded
gradient norms are `tf.gradients` at the weights and feed of the call, and two
identical runs record the same bits (the recorder's own gradient ops once read
weights the call's apply ops were overwriting in place).

The program runs in a child process (`tests/support/tf1_ref_program.py`): disabling
v2 behaviour is process-wide.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow.compat.v1 as tf

from tb_gradscope import _tf_private as private
from tb_gradscope.integrations.tf1._ref_reads import aliased_variable

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))


def _run(logdir) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.tf1_ref_program", str(logdir)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    return [_run(tmp_path_factory.mktemp(f"ref{i}")) for i in range(2)]


def test_program_really_uses_reference_variables(two_runs):
    assert two_runs[0]["ref"] is True
    assert two_runs[0]["cond_context"] is True  # private.in_control_flow under v1 control flow


def test_recorded_norms_equal_tf_gradients_at_the_same_weights_and_feed(two_runs):
    run = two_runs[0]
    worst = 0.0
    for loss, per_step in run["expected"].items():
        assert sorted(run["recorded"][loss], key=int) == sorted(per_step, key=int)
        for step, scopes in per_step.items():
            for scope, want in scopes.items():
                have = float(
                    np.frombuffer(bytes.fromhex(run["recorded"][loss][step][scope]), np.float32)[0]
                )
                worst = max(worst, abs(have - want) / want)
    assert worst < 1e-5, f"recorded l2 off tf.gradients by up to {worst:.2%}"


def test_two_identical_runs_record_the_same_bits(two_runs):
    assert two_runs[0]["recorded"] == two_runs[1]["recorded"]


def test_private_tensorflow_symbols_the_tf1_integration_uses_still_work():
    graph = tf.Graph()
    with graph.as_default():
        with tf.variable_scope("net", use_resource=False):
            w = tf.get_variable("w", [2, 2])
        read = tf.identity(w)
        y = tf.matmul(tf.ones([1, 2]), read)
    assert private.is_ref_dtype(w._ref().dtype) and not private.is_ref_dtype(read.dtype)
    assert aliased_variable(read) is w.op and aliased_variable(y) is None
    assert not private.in_control_flow(y.op)
    with graph.as_default():
        other = tf.ones([2, 2])
    private.update_input(y.op, 1, other)
    assert y.op.inputs[1] is other
