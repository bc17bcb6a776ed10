"""Small pieces the shapes share, so each shape file reads as its training loop.

TF2: seeded data, tiny models, target updates and probe builders. TF1: the
`Session` loop every simple TF1 shape runs (the product attached as docs/TF1.md
says, the oracle around each step), its probes, and seed 01's two-head `Agent`
graph, which the TF1 integration tests build too (`tests/support/tf1_support.py`).

Models use tanh (no dead units: a zero gradient would be a numerical accident,
not a flow fact) and a few units; data is a pure function of the step.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
import tensorflow as tf
import tensorflow.compat.v1 as tf1

from tb_gradscope.integrations.tf1 import GraphRecorder
from tb_gradscope.scopes import variable_name
from tests.support.corpus import oracle
from tests.support.corpus.spec import Forward, LossProbe, PairProbe, TF1Probe

OBS, ACTIONS, BATCH = 3, 2, 8


def seed(n: int) -> None:
    keras.utils.set_random_seed(n)


def mlp(
    name: str, sizes: Sequence[int], inputs: int = OBS, activation: str = "tanh"
) -> keras.Sequential:
    """A Sequential of Dense layers, the last one linear, built on `inputs` features."""
    layers = [keras.Input((inputs,))]
    for i, size in enumerate(sizes):
        last = i == len(sizes) - 1
        layers.append(
            keras.layers.Dense(size, activation=None if last else activation, name=f"l{i + 1}")
        )
    return keras.Sequential(layers, name=name)


def batch(
    step: int, obs: int = OBS, actions: int = ACTIONS, n: int = BATCH
) -> dict[str, tf.Tensor]:
    """A transition batch that is a pure function of `step`."""
    rng = np.random.default_rng(1000 + step)
    return {
        "s": tf.constant(rng.normal(size=(n, obs)), tf.float32),
        "a": tf.constant(rng.integers(0, actions, size=n), tf.int32),
        "a_cont": tf.constant(rng.uniform(-1, 1, size=(n, actions)), tf.float32),
        "r": tf.constant(rng.normal(size=n), tf.float32),
        "s2": tf.constant(rng.normal(size=(n, obs)), tf.float32),
        "done": tf.constant((rng.uniform(size=n) < 0.2).astype(np.float32)),
        "noise": tf.constant(rng.normal(size=(n, actions)), tf.float32),
        "y": tf.constant(rng.normal(size=(n, 1)), tf.float32),
    }


def copy_weights(target: Any, online: Any) -> None:
    for t, o in zip(target.weights, online.weights):
        t.assign(o)


def polyak(target: Any, online: Any, tau: float) -> None:
    for t, o in zip(target.weights, online.weights):
        t.assign((1.0 - tau) * t + tau * o)


def grads_of(loss: Any, tape: tf.GradientTape, variables: Sequence[Any]) -> list[tuple[Any, Any]]:
    """(gradient, variable) pairs with None gradients left out (what an optimizer applies)."""
    return [(g, v) for g, v in zip(tape.gradient(loss, variables), variables) if g is not None]


def loss_probe(
    name: str,
    forward: Callable[[], Forward],
    optimizer: Any,
    variables: Callable[[], Sequence[Any]],
) -> LossProbe:
    """A probe whose own update applies this loss's gradient with `optimizer`
    over `variables()` (the step's var_list for that optimizer)."""

    def update() -> None:
        built(optimizer, variables())
        f = forward()
        pairs = [
            (g, v)
            for g, v in zip(
                f.tape.gradient(f.value, variables(), output_gradients=f.output_gradients),
                variables(),
            )
            if g is not None
        ]
        if pairs:
            optimizer.apply_gradients(pairs)

    return LossProbe(name, forward, update)


def built(optimizer: Any, variables: Sequence[Any]) -> Any:
    """Builds a Keras optimizer on the step's whole var_list (as the step's own
    apply does) before an oracle update applies only the non-None gradients."""
    if not getattr(optimizer, "built", True):
        optimizer.build(list(variables))
    return optimizer


def taped(fn: Callable[[], Any], before: Callable[[], Any] | None = None) -> Callable[[], Forward]:
    """A Forward maker: `before()` runs outside the tape (the step's pre-tape
    work), `fn(pre)` inside it, as the step does."""

    def forward() -> Forward:
        pre = before() if before is not None else None
        with tf.GradientTape() as tape:
            value = fn(pre)
        return Forward(tape, value)

    return forward


def pair_probe(pair: Any, target: Any, online: Any, root: str) -> PairProbe:
    """The probe of a product Pair made from two models (`root` = the target's key)."""
    named = oracle.named_variables({root: target})
    return PairProbe(pair.name, named, list(online.weights))


def variables_of(models: Mapping[str, Any]) -> dict[str, Any]:
    return oracle.named_variables(models)


# ----- TF1 Session shapes ------------------------------------------------------


def tf1_probe(
    sess,
    gs: GraphRecorder,
    feed: dict,
    losses: dict,
    train_ops: dict,
    pairs: list,
    names: Mapping[str, str] | None = None,
) -> TF1Probe:
    """`names`: {TF variable name: product name} where the product renames one
    (an ExponentialMovingAverage shadow under its pair's `ema/` root)."""
    names = names or {}
    return TF1Probe(
        session=sess,
        feed_dict=feed,
        losses=losses,
        train_ops=train_ops,
        variables={
            names.get(variable_name(v.name), variable_name(v.name)): v for v in gs.variables
        },
        pairs=pairs,
    )


def tf1_pair_probe(pair: Any) -> PairProbe:
    return PairProbe(pair.name, dict(zip(pair.target_names, pair.target)), list(pair.online))


def tf1_loop(
    logdir: str,
    observer: Any,
    graph: Any,
    *,
    losses: dict,
    train_ops: dict,
    rules: Sequence[str],
    steps: int,
    feed: Callable[[int], dict],
    step: Callable[[Any, int, dict], None],
    pairs: Callable[[], list] = list,
    start: Sequence[Any] = (),
    names: Mapping[str, str] | None = None,
) -> None:
    """A TF1 shape's training: `GraphRecorder(...)` recording every step and
    `gs.wrap(sess)`, as docs/TF1.md says; the `start` ops run once (init, the
    first target copy); then per step, `feed(step)` is the oracle's feed and
    `step(run, step, feed)` the shape's own calls.

    `pairs()` makes the pairs in the shape's graph. A TF1 recorder reads a
    pair's drift at step s just before step s's first train call, after step
    s - 1 and its target update (the loops put target updates at the end of a
    step), so `observer.after(s)` comes right after `observer.before(s, ...)`:
    both see the state the product reads. `names` as `tf1_probe`'s.
    """
    with graph.as_default():
        made = pairs()
        gs = GraphRecorder(
            logdir,
            losses=losses,
            train_ops=train_ops,
            every_n_steps=1,
            pairs=made or None,
            rules=list(rules),
        )
        sess = tf1.Session()
        probes = [tf1_pair_probe(p) for p in made]
        observer.prepare(tf1_probe(sess, gs, {}, losses, train_ops, probes, names))
        run = gs.wrap(sess)
        for op in start:
            run.run(op)
        for s in range(steps):
            fed = feed(s)
            observer.before(s, tf1_probe(sess, gs, fed, losses, train_ops, probes, names))
            observer.after(s)  # the drift GraphRecorder reads at this step
            step(run, s, fed)
        run.close()


def tf1_agent_loop(
    logdir: str,
    observer: Any,
    m: Any,
    *,
    rules: Sequence[str],
    steps: int,
    feed: Callable[[int], dict],
) -> None:
    """`tf1_loop` for a two-head Agent (`loss1`/`train1`, `loss2`/`train2`, `init`):
    each step runs train1, then train2, on the same feed."""

    def step(run, _step: int, fed: dict) -> None:
        run.run(m.train1, fed)
        run.run(m.train2, fed)

    tf1_loop(
        logdir,
        observer,
        m.graph,
        losses={"loss1": m.loss1, "loss2": m.loss2},
        train_ops={"loss1": m.train1, "loss2": m.train2},
        rules=rules,
        start=[m.init],
        steps=steps,
        feed=feed,
        step=step,
    )


def tf1_agent(*, seed: int, n1: int, input_dim: int, lr: float, loss2_var_list: str) -> Any:
    """Seed 01's multi-head `Agent` in its own `tf.Graph`: shared layer1, two
    heads, two Adam optimizers through `var_list` (the body is the seed's code,
    its sizes and learning rate as arguments, the graph seeded).

    loss1's var_list is layer1 + layer2_1, as the seed writes it; loss2's is
    `loss2_var_list`: "layer1+head" (the seed's: layer1 + layer2_2), "head"
    (layer2_2 only) or "all" (no var_list: every trainable variable).
    """
    graph = tf1.Graph()
    with graph.as_default():
        tf1.set_random_seed(seed)
        output_dim = 1
        X = tf1.placeholder(tf.float32, [None, input_dim], "X")
        Y1 = tf1.placeholder(tf.float32, [None, output_dim], "Y1")
        Y2 = tf1.placeholder(tf.float32, [None, output_dim], "Y2")

        with tf1.variable_scope("Agent"):
            with tf1.variable_scope("layer1"):
                w1 = tf1.get_variable("w1", [input_dim, n1], trainable=True)
                b1 = tf1.get_variable("b1", [1, n1], trainable=True)
                s = tf.matmul(X, w1) + b1
            with tf1.variable_scope("layer2_1"):
                w21 = tf1.get_variable("w21", [n1, output_dim], trainable=True)
                b21 = tf1.get_variable("b21", [1, output_dim], trainable=True)
                y1 = tf.matmul(s, w21) + b21
            with tf1.variable_scope("layer2_2"):
                w22 = tf1.get_variable("w22", [n1, output_dim], trainable=True)
                b22 = tf1.get_variable("b22", [1, output_dim], trainable=True)
                y2 = tf.matmul(s, w22) + b22

        layer1_params = tf1.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES, scope="Agent/layer1")
        layer21_params = tf1.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES, scope="Agent/layer2_1")
        layer22_params = tf1.get_collection(tf1.GraphKeys.GLOBAL_VARIABLES, scope="Agent/layer2_2")

        loss1 = tf1.losses.mean_squared_error(labels=Y1, predictions=y1)
        loss2 = tf1.losses.mean_squared_error(labels=Y2, predictions=y2)

        var_list2 = {
            "layer1+head": layer1_params + layer22_params,
            "head": layer22_params,
            "all": None,
        }[loss2_var_list]
        train1 = tf1.train.AdamOptimizer(lr).minimize(
            loss1, var_list=layer1_params + layer21_params
        )
        train2 = tf1.train.AdamOptimizer(lr).minimize(loss2, var_list=var_list2)
    return types.SimpleNamespace(**locals())
