"""200 steps of each demo's model and loss, with and without tb_gradscope, for
tests/e2e/reliability/test_reliability_determinism.py. Runs in a child process because
`enable_op_determinism` is process-wide:

  python -m tests.support.reliability1_determinism STEPS

Prints one JSON line {case: {"plain": sha, "plain_again": sha, "recorded": sha,
"recorded_bytes": n}}
where each sha is the SHA-256 of the trained weights' bytes. Every step is
recorded (every_n_steps=1), the most the hook ever adds. Cases:
- custom loop (Recorder): dqn (online/target MLPs, TD, hard copy) and
  multihead (two losses, two optimizers), each clean and leaky twin, on the
  demos' own builders with seeded synthetic batches;
- Keras fit (GradscopeCallback): multihead's Agent compiled with its two losses;
- TF1 Session (GraphRecorder.wrap): dqn_tf1's graph, clean and leaky.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile

import numpy as np

BATCH = 32


_LOGDIRS: list[str] = []


def _logdir() -> str:
    _LOGDIRS.append(tempfile.mkdtemp())
    return _LOGDIRS[-1]


def _recorded_bytes() -> int:
    """Bytes of event files written since the last call (proof the hook recorded)."""
    import glob
    import os

    total = sum(
        os.path.getsize(f)
        for d in _LOGDIRS
        for f in glob.glob(os.path.join(d, "**", "*tfevents*"), recursive=True)
    )
    _LOGDIRS.clear()
    return total


def _sha(arrays) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()


def _batches(seed: int, steps: int, obs: int, actions: int):
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        yield (
            rng.normal(size=(BATCH, obs)).astype(np.float32),
            rng.integers(0, actions, BATCH).astype(np.int32),
            rng.normal(size=BATCH).astype(np.float32),
            rng.normal(size=(BATCH, obs)).astype(np.float32),
            (rng.random(BATCH) < 0.1).astype(np.float32),
        )


def dqn(twin: str, steps: int, recorded: bool) -> str:
    import keras
    import tensorflow as tf

    from tb_gradscope.demos import common
    from tb_gradscope.demos import dqn as demo
    from tb_gradscope.record import Recorder

    common.seed_everything(3)
    online = common.mlp("online", 4, demo.HIDDEN, 2)
    target = common.mlp("target", 4, demo.HIDDEN, 2)
    common.hard_copy(online, target)
    optimizer = keras.optimizers.Adam(1e-3)
    leaky = twin == "leaky"
    variables = online.trainable_variables + (target.trainable_variables if leaky else [])
    rec = (
        Recorder(_logdir(), every_n_steps=1, models={"online": online, "target": target})
        if recorded
        else None
    )

    @tf.function
    def train_step(s, a, r, s2, done):
        tape_cm = rec.tape() if rec else tf.GradientTape()
        with tape_cm as tape:
            q_target = r + demo.GAMMA * (1.0 - done) * tf.reduce_max(target(s2), axis=1)
            if not leaky:
                q_target = tf.stop_gradient(q_target)
            q_sa = tf.gather(online(s), a, axis=1, batch_dims=1)
            td = tf.reduce_mean(tf.square(q_target - q_sa))
        if rec:
            rec.apply(optimizer, rec.gradients(tape, {"td": td}, variables))
        else:
            optimizer.apply_gradients(zip(tape.gradient(td, variables), variables))
        return td

    for i, batch in enumerate(_batches(3, steps, 4, 2)):
        train_step(*map(tf.constant, batch))
        if (i + 1) % demo.SYNC_EVERY == 0:
            common.hard_copy(online, target)
    if rec:
        rec.close()
    return _sha([v.numpy() for v in online.weights + target.weights])


def multihead(twin: str, steps: int, recorded: bool) -> str:
    import keras
    import tensorflow as tf

    from tb_gradscope.demos import common
    from tb_gradscope.demos import multihead as demo
    from tb_gradscope.record import Recorder

    common.seed_everything(5)
    agent = demo.build_agent()
    var_list1 = demo._variables(agent, "layer1", "layer2_1")  # noqa: SLF001
    var_list2 = (
        list(agent.trainable_variables) if twin == "leaky" else demo._variables(agent, "layer2_2")
    )  # noqa: SLF001
    opt = demo.PerLossOptimizers(
        keras.optimizers.Adam(1e-2), len(var_list1), keras.optimizers.Adam(1e-2)
    )
    rec = Recorder(_logdir(), every_n_steps=1, models={"Agent": agent}) if recorded else None

    @tf.function
    def train_step(x, y1, y2):
        with tf.GradientTape(persistent=True) as tape:
            p1, p2 = agent(x)
            loss1 = tf.reduce_mean(tf.square(y1 - p1))
            loss2 = tf.reduce_mean(tf.square(y2 - p2))
        gv1 = list(zip(tape.gradient(loss1, var_list1), var_list1))
        gv2 = [(g, v) for g, v in zip(tape.gradient(loss2, var_list2), var_list2) if g is not None]
        opt.split = len(gv1)
        if rec:
            rec.record_gradients(
                {"loss1": gv1, "loss2": gv2}, losses={"loss1": loss1, "loss2": loss2}
            )
            rec.apply(opt, gv1 + gv2)
        else:
            opt.apply_gradients(gv1 + gv2)

    x, y1, y2 = demo.make_task(5)
    rng = np.random.default_rng(5)
    for _ in range(steps):
        idx = rng.integers(0, len(x), size=BATCH)
        train_step(x[idx], y1[idx], y2[idx])
    if rec:
        rec.close()
    return _sha([v.numpy() for v in agent.weights])


def multihead_fit(twin: str, steps: int, recorded: bool) -> str:
    import keras

    from tb_gradscope.demos import common
    from tb_gradscope.demos import multihead as demo
    from tb_gradscope.integrations.keras import GradscopeCallback

    common.seed_everything(7)
    agent = demo.build_agent()
    agent.compile(keras.optimizers.Adam(1e-2), loss=["mse", "mse"])
    x, y1, y2 = demo.make_task(7, n=steps * BATCH)
    callbacks = [GradscopeCallback(_logdir(), every_n_batches=1)] if recorded else []
    agent.fit(
        x, [y1, y2], batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=callbacks
    )
    return _sha(agent.get_weights())


def dqn_tf1(twin: str, steps: int, recorded: bool) -> str:
    import tensorflow as tf

    from tb_gradscope.demos import dqn_tf1 as demo
    from tb_gradscope.integrations.tf1 import GraphRecorder

    v1 = tf.compat.v1
    m = demo.build_graph(twin, 4, 2, seed=11)
    with m.graph.as_default():
        sess = v1.Session(graph=m.graph)
        if recorded:
            gs = GraphRecorder(
                _logdir(), losses={"td": m.loss}, train_ops={"td": m.train_op}, every_n_steps=1
            )
            sess = gs.wrap(sess)
        with sess:
            sess.run(m.init)
            sess.run(m.replace_op)
            for i, (s, a, r, s2, done) in enumerate(_batches(11, steps, 4, 2)):
                sess.run([m.train_op, m.loss], {m.s: s, m.a: a, m.r: r, m.s_: s2, m.done: done})
                if (i + 1) % demo.SYNC_EVERY == 0:
                    sess.run(m.replace_op)
            return _sha(sess.run(m.e_params + m.t_params))


CASES = {
    "custom_loop/dqn/clean": (dqn, "clean"),
    "custom_loop/dqn/leaky": (dqn, "leaky"),
    "custom_loop/multihead/clean": (multihead, "clean"),
    "custom_loop/multihead/leaky": (multihead, "leaky"),
    "keras_fit/multihead": (multihead_fit, "clean"),
    "tf1_session/dqn_tf1/clean": (dqn_tf1, "clean"),
    "tf1_session/dqn_tf1/leaky": (dqn_tf1, "leaky"),
}


def main(steps: int) -> None:
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
    out = {}
    for name, (fn, twin) in CASES.items():
        out[name] = {
            "plain": fn(twin, steps, False),
            "recorded": fn(twin, steps, True),
            "recorded_bytes": _recorded_bytes(),
            "plain_again": fn(twin, steps, False),
        }
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]))
