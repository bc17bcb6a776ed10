"""A TF1 program run as TF1 code usually runs today, under
`tf.compat.v1.disable_v2_behavior()` (reference variables), for
tests/unit/integrations/tf1/test_tf1_ref_vars.py. A child process, because disabling v2 behaviour is
process-wide:

  python -m tests.support.tf1_ref_program LOGDIR

Trains a 4-layer tanh MLP with Adam `minimize` (and a second loss whose
gradient is clipped before its own Adam applies it, so the recorder keeps its
own gradient for every variable of both) with a GraphRecorder recording every
step. Before each step it computes `tf.gradients` of both losses at the same
weights and feed on the raw session. Prints one JSON line:
{"ref": bool, "cond_context": bool, "recorded": {loss: {step: {scope: l2 as float32 hex}}},
 "expected": {loss: {step: {scope: float64 l2}}}}
"""

from __future__ import annotations

import glob
import json
import os
import sys

import numpy as np
import tensorflow.compat.v1 as tf

tf.disable_v2_behavior()

from tensorboard.backend.event_processing import event_file_loader  # noqa: E402

from tb_gradscope import format as fmt  # noqa: E402
from tb_gradscope._tf_private import in_control_flow  # noqa: E402
from tb_gradscope.integrations.tf1 import GraphRecorder  # noqa: E402

STEPS = 12


def main(logdir: str) -> None:
    tf.set_random_seed(5)
    X = tf.placeholder(tf.float32, [None, 20], "X")
    Y = tf.placeholder(tf.float32, [None, 1], "Y")
    h = X
    for i, units in enumerate([64, 64, 64, 1]):
        with tf.variable_scope(f"l{i}"):
            w = tf.get_variable("w", [int(h.shape[-1]), units])
            b = tf.get_variable("b", [units], initializer=tf.constant_initializer(0.1))
            h = tf.matmul(h, w) + b
            h = tf.nn.tanh(h) if units > 1 else h
    branch = tf.cond(tf.constant(True), lambda: h + 1.0, lambda: h)  # v1 cond: Switch/Merge
    fit = tf.reduce_mean(tf.square(h - Y))
    aux = tf.reduce_mean(tf.abs(h + Y))
    train_fit = tf.train.AdamOptimizer(0.01).minimize(fit)
    opt = tf.train.AdamOptimizer(0.01)
    clipped = [(tf.clip_by_norm(g, 0.5), v) for g, v in opt.compute_gradients(aux)]
    train_aux = opt.apply_gradients(clipped)
    variables = tf.trainable_variables()
    scopes = [v.name[:-2].rsplit("/", 1)[0] for v in variables]
    check = {"fit": tf.gradients(fit, variables), "aux": tf.gradients(aux, variables)}
    gs = GraphRecorder(
        logdir,
        losses={"fit": fit, "aux": aux},
        train_ops={"fit": train_fit, "aux": train_aux},
        every_n_steps=1,
    )
    raw = tf.Session(
        config=tf.ConfigProto(inter_op_parallelism_threads=4, intra_op_parallelism_threads=4)
    )
    sess = gs.wrap(raw)
    sess.run(tf.global_variables_initializer())
    rng = np.random.default_rng(0)
    expected: dict = {"fit": {}, "aux": {}}
    for step in range(STEPS):
        feed = {X: rng.normal(size=(256, 20)), Y: rng.normal(size=(256, 1))}
        for loss, train in (("fit", train_fit), ("aux", train_aux)):
            grads = raw.run(check[loss], feed)
            sums: dict[str, float] = {}
            for scope, g in zip(scopes, grads):
                sums[scope] = sums.get(scope, 0.0) + float(np.sum(np.square(g.astype(np.float64))))
            expected[loss][step] = {s: float(np.sqrt(v)) for s, v in sums.items()}
            sess.run(train, feed)
    sess.close()
    print(
        json.dumps(
            {
                "ref": variables[0].dtype.is_ref_dtype
                if hasattr(variables[0].dtype, "is_ref_dtype")
                else "_ref" in variables[0].dtype.name,
                "cond_context": in_control_flow(branch.op.inputs[0].op),
                "recorded": _recorded(logdir, sorted(set(scopes))),
                "expected": expected,
            }
        )
    )


def _recorded(logdir: str, scopes: list[str]) -> dict:
    infos: dict = {}
    out: dict = {}
    for path in glob.glob(os.path.join(logdir, "events.out.tfevents.*")):
        for event in event_file_loader.EventFileLoader(path).Load():
            for value in event.summary.value:
                if value.metadata.plugin_data.content:
                    infos[value.tag] = fmt.parse_plugin_content(value.metadata.plugin_data.content)
                info = infos.get(value.tag)
                if info is None or info.kind != fmt.Kind.GRAD_STATS:
                    continue
                table = fmt.decode_table(info, tf.make_ndarray(value.tensor))
                out.setdefault(info.name, {})[event.step] = {
                    s: np.float32(table.row(s)["l2"]).tobytes().hex() for s in scopes
                }
    return out


if __name__ == "__main__":
    main(sys.argv[1])
