"""The callback only observes: weights trained with it are bitwise those trained without.

Determinism is switched on process-wide (`enable_op_determinism`), so the
comparison runs in a child process and leaves the test session alone. Every
step is recorded (every_n_batches=1), the most the callback ever adds; in
`every_3_batches` the model's own compiled step and the instrumented one take
turns (the host picks one per call), which must not change a bit either.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.slow

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

CHILD = textwrap.dedent(
    """
    import json, sys, tempfile, warnings
    import numpy as np
    import tensorflow as tf
    tf.config.experimental.enable_op_determinism()
    from tb_gradscope.integrations.keras import GradscopeCallback
    from tests.support.keras_support import fit, two_output_model

    def weights(mode, callbacks):
        model = two_output_model(**mode)
        fit(model, callbacks)
        return [w.tobytes() for w in model.get_weights()]

    out = {}
    modes = {
        "graph": dict(jit_compile=False, steps_per_execution=1),
        "jit": dict(jit_compile=True, steps_per_execution=1),
        "steps_per_execution_4": dict(jit_compile=False, steps_per_execution=4),
        "every_3_batches": dict(jit_compile=False, steps_per_execution=1),
    }
    for name, mode in modes.items():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            every = 3 if name == "every_3_batches" else 1
            callback = GradscopeCallback(tempfile.mkdtemp(), every_n_batches=every)
            observed = weights(mode, [callback])
        plain = weights(mode, [])
        out[name] = {
            "identical": observed == plain,
            "recording": not callback.disabled and bool(callback.probe.captured),
            "gradscope_warnings": [str(w.message) for w in caught if "Gradscope" in str(w.message)],
        }
    broken = tempfile.mktemp()
    open(broken, "w").close()  # a file where the logdir should be: writing fails
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        callback = GradscopeCallback(broken + "/run", every_n_batches=1)
        observed = weights(modes["graph"], [callback])
    out["broken_logdir"] = {
        "identical": observed == weights(modes["graph"], []),
        "recording": not callback.disabled,
        "gradscope_warnings": [str(w.message) for w in caught if "Gradscope" in str(w.message)],
    }
    print("RESULT" + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def results() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    return json.loads(lines[-1][len("RESULT") :])


@pytest.mark.parametrize("mode", ["graph", "jit", "steps_per_execution_4", "every_3_batches"])
def test_weights_are_bitwise_identical_with_and_without_the_callback(results, mode):
    assert results[mode]["recording"], results[mode]
    assert results[mode]["gradscope_warnings"] == []
    assert results[mode]["identical"]


def test_a_failing_callback_warns_once_and_fit_trains_as_without_it(results):
    broken = results["broken_logdir"]
    assert not broken["recording"]
    assert len(broken["gradscope_warnings"]) == 1
    assert "GradscopeCallback stopped recording" in broken["gradscope_warnings"][0]
    assert broken["identical"]
