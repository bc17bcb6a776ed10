"""LegacyGradscopeCallback under TF_USE_LEGACY_KERAS=1 (tf_keras), in a child process.

`tf.keras` picks Keras 2 or 3 once per process, so the legacy fit runs in a
child: two outputs with weighted losses, recorded every 3 steps; the child
reports recorded and manually recomputed norms, and whether the weights match
a fit without the callback bitwise.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

# tf-keras is in the `test` extra: a missing one fails here, never skips green.
import tf_keras  # noqa: F401

pytestmark = pytest.mark.slow

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", ".."))

CHILD = textwrap.dedent(
    """
    import json, tempfile
    import numpy as np
    import tensorflow as tf
    tf.config.experimental.enable_op_determinism()
    assert tf.keras.__name__.startswith("tf_keras"), tf.keras.__name__
    from tb_gradscope.integrations.keras import LegacyGradscopeCallback
    from tests.support.tf1_support import read_records

    rs = np.random.RandomState(0)
    x = rs.randn(64, 4).astype("float32")
    y = {"q": rs.randn(64, 1).astype("float32"), "aux": rs.randn(64, 1).astype("float32")}
    WEIGHTS = {"q": 1.0, "aux": 0.2}

    def model(jit):
        tf.keras.utils.set_random_seed(0)
        inputs = tf.keras.Input((4,))
        body = tf.keras.layers.Dense(8, activation="relu", name="body")(inputs)
        q = tf.keras.layers.Dense(1, name="q")(body)
        aux = tf.keras.layers.Dense(1, name="aux")(tf.keras.layers.Dense(4, name="aux_hidden")(inputs))
        m = tf.keras.Model(inputs, {"q": q, "aux": aux}, name="agent")
        m.compile(tf.keras.optimizers.Adam(0.01), loss={"q": "mse", "aux": "mse"},
                  loss_weights=dict(WEIGHTS), jit_compile=jit)
        return m

    class Before(tf.keras.callbacks.Callback):
        def __init__(self):
            super().__init__(); self.weights = []
        def on_train_batch_begin(self, batch, logs=None):
            self.weights.append(self.model.get_weights())

    out = {}
    for jit in (False, True):
        logdir = tempfile.mkdtemp()
        observed, before = model(jit), Before()
        callback = LegacyGradscopeCallback(logdir, every_n_batches=3)
        observed.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[before, callback])
        plain = model(jit)
        plain.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0)
        identical = all(a.tobytes() == b.tobytes() for a, b in zip(observed.get_weights(), plain.get_weights()))
        records = read_records(logdir)
        checks = []
        for loss, weight in WEIGHTS.items():
            for rec in records[("grad_stats", loss)]:
                probe = model(jit)
                probe.set_weights(before.weights[rec.step])
                start = (rec.step % 4) * 16
                with tf.GradientTape() as tape:
                    pred = probe(x[start:start + 16], training=True)[loss]
                    value = weight * tf.reduce_mean(tf.square(y[loss][start:start + 16] - pred))
                layer = probe.get_layer(loss)
                grads = tape.gradient(value, layer.trainable_weights)
                expected = float(np.sqrt(sum(np.sum(np.square(g.numpy(), dtype=np.float64)) for g in grads)))
                table = rec.value
                checks.append([loss, rec.step, table.row("agent/" + loss)["l2"], expected,
                               table.row("agent/aux" if loss == "q" else "agent/body")["grad_vars"]])
        out[str(jit)] = {"identical": identical, "checks": checks,
                         "steps": [r.step for r in records[("grad_stats", "q")]]}
    print("RESULT" + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def results() -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2")
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


@pytest.mark.parametrize("jit", ["False", "True"])
def test_legacy_fit_records_weighted_per_output_norms_and_only_observes(results, jit):
    result = results[jit]
    assert result["steps"] == [0, 3, 6]
    assert result["identical"]
    for loss, step, recorded, expected, other_head_vars in result["checks"]:
        assert recorded == pytest.approx(expected, rel=1e-5), (loss, step)
        assert other_head_vars == 0, (loss, step)
