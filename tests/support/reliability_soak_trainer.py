"""A live training run for tests/e2e/reliability/test_soak.py: the real Recorder recording every
step of a small DQN-style step (TD target through tf.stop_gradient on a target
network, an auxiliary loss, Polyak-averaged target), flushed after each step.

  python -m tests.support.reliability_soak_trainer LOGDIR SECONDS

trains until SECONDS have passed (a bounded loop), printing "step N" lines
every 50 steps and "done N" at the end.
"""

from __future__ import annotations

import sys
import time

RUN = "soak"
LOSSES = ("td", "aux")


def main(logdir: str, seconds: float) -> None:
    import numpy as np
    import tensorflow as tf

    from tb_gradscope.record import Recorder

    class Net(tf.Module):
        def __init__(self, name: str):
            super().__init__(name=name)
            with self.name_scope:
                self.l1 = tf.Variable(
                    tf.random.stateless_normal([4, 16], seed=[1, 2]) * 0.3, name="l1/kernel"
                )
                self.l2 = tf.Variable(
                    tf.random.stateless_normal([16, 2], seed=[3, 4]) * 0.3, name="l2/kernel"
                )

        def __call__(self, x):
            return tf.nn.relu(x @ self.l1) @ self.l2

    online, target = Net("online"), Net("target")
    variables = [online.l1, online.l2, target.l1, target.l2]
    rec = Recorder(logdir=f"{logdir}/{RUN}", every_n_steps=1, variables=variables)
    optimizer = tf.keras.optimizers.SGD(0.01)
    x = tf.constant(np.random.RandomState(0).randn(32, 4), tf.float32)

    @tf.function
    def train_step():
        with rec.tape() as tape:
            q = online(x)
            td = tf.reduce_mean((q - (1.0 + 0.9 * tf.stop_gradient(target(x)))) ** 2)
            aux = tf.reduce_mean(q**2) * 0.01
        rec.apply(optimizer, rec.gradients(tape, dict(zip(LOSSES, (td, aux))), variables))
        for t, o in ((target.l1, online.l1), (target.l2, online.l2)):
            t.assign(0.99 * t + 0.01 * o)

    deadline = time.monotonic() + seconds
    steps = 0
    while time.monotonic() < deadline:
        train_step()
        rec.flush()
        steps += 1
        if steps % 50 == 0:
            print(f"step {steps}", flush=True)
    rec.close()
    print(f"done {steps}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
