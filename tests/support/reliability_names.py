"""Hostile names written by the real Recorder, for tests/e2e/reliability/test_hostile_names.py.

A tf.Module whose variables sit under hostile scope names (HTML/JS payloads,
a `javascript:` URL, a 10 kB name, RTL override, newlines, terminal escapes)
and losses named likewise, trained for STEPS steps with every step recorded.
The JS payloads set `window.__gsPwned` (or open a dialog) if they ever run.

Runs in a subprocess (TensorFlow stays out of the test process), copied to a
file with a hostile name (FILE) so that the blocked edge's source line names it:
  python FILE LOGDIR
writes LOGDIR/RUN.
"""

from __future__ import annotations

import sys

RUN = "hostile_recorded"
STEPS = 3
FLAG = "__gsPwned"
LONG = "L" * 10_000
# Scope names (one variable `w` under each). '/' separates scopes, so the
# payloads that need a slash go into loss names instead.
SCOPES = (
    f"<img src=x onerror=window.{FLAG}=1>",
    "<svg onload=alert(1)><b>bold",
    f"javascript:window.{FLAG}=2",
    LONG,
    "\u202eevil\u05d0\u05d1 rtl",
    "new\nline",
    "\x1b[2J\x1b]0;title\x07esc",
    "tab\tcr\rdel\x7fnul",
)
FILE = f"<img src=x onerror=window.{FLAG}=5>\u202e.py"
LOSSES = (
    f"</script><script>window.{FLAG}=3</script>",
    "<img src=x onerror=alert(1)>",
    "javascript:alert(1)",
    "\x1b[31mred\x1b[0m\nloss",
    "\u202eloss",
    "L" * 10_000 + "oss",
    "plain",  # blocked: it reads the first scope through tf.stop_gradient
    "\x1b]0;title\x07bell",
)


def write(logdir: str) -> None:
    import tensorflow as tf

    from tb_gradscope.record import Recorder

    class Net(tf.Module):
        def __init__(self):
            super().__init__(name="net")
            self.weights = [
                tf.Variable(tf.ones([3]) * (i + 1), name=f"{s}/w") for i, s in enumerate(SCOPES)
            ]

    net = Net()
    rec = Recorder(logdir=f"{logdir}/{RUN}", every_n_steps=1, variables=net.weights)
    optimizer = tf.keras.optimizers.SGD(0.1)
    x = tf.constant([1.0, 2.0, 3.0])

    @tf.function
    def train_step():
        with rec.tape() as tape:
            values = [tf.reduce_sum(v * x) ** 2 for v in net.weights]
            losses = {name: values[i % len(values)] for i, name in enumerate(LOSSES)}
            losses["plain"] = tf.reduce_sum(tf.stop_gradient(net.weights[0]) * net.weights[-1])
        rec.apply(optimizer, rec.gradients(tape, losses, net.weights))

    for _ in range(STEPS):
        train_step()
    rec.close()


if __name__ == "__main__":
    write(sys.argv[1])
