"""Demo `multihead`: seed 01's Agent, a layer feeding two heads, two optimizers.

`Agent/layer1` feeds two heads, `Agent/layer2_1` (loss1) and `Agent/layer2_2`
(loss2). Each loss has its own Adam optimizer with its own variable list: loss1
trains layer1 + layer2_1; loss2 trains only its head, layer2_2, on the shared
features that loss1 learns (the shared layer is loss1's alone). The leaky twin
builds loss2's optimizer without a var_list, i.e. over every trainable
variable, so loss2 also moves `Agent/layer1`: its cell there turns from
`ignored` to `updates`.

The seed lists layer1 in both var_lists; with that choice dropping the var_list
would change nothing (loss2 never reaches layer2_1), so there would be no leak
to show. docs/CONCEPTS.md (*The demos*) and docs/TF1.md tell the same story.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.demos import common, recording
from tb_gradscope.demos.multihead_task import BATCH, INPUT_DIM, N1, RULES, make_task
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec


def build_agent() -> keras.Model:
    """The seed's graph: X -> layer1 -> (layer2_1 -> y1, layer2_2 -> y2)."""
    x = keras.Input((INPUT_DIM,), name="X")
    s = keras.layers.Dense(N1, name="layer1")(x)
    y1 = keras.layers.Dense(1, name="layer2_1")(s)
    y2 = keras.layers.Dense(1, name="layer2_2")(s)
    return keras.Model(x, [y1, y2], name="Agent")


class PerLossOptimizers:
    """Two optimizers applied as one step, like running TF1's two minimize ops together.

    `Recorder.apply` takes one optimizer and advances the step once; this
    applies the first `split` (gradient, variable) pairs with `first` and the
    rest with `second`, so the recorded update covers both.
    """

    def __init__(
        self, first: keras.optimizers.Optimizer, split: int, second: keras.optimizers.Optimizer
    ):
        self.first, self.split, self.second = first, split, second

    def apply_gradients(self, grads_and_vars: list) -> None:
        self.first.apply_gradients(grads_and_vars[: self.split])
        self.second.apply_gradients(grads_and_vars[self.split :])


def _variables(agent: keras.Model, *layers: str) -> list:
    return [v for name in layers for v in agent.get_layer(name).trainable_variables]


def train(spec: RunSpec) -> RunResult:
    """Trains one twin: each step applies opt1 for loss1 and opt2 for loss2."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"multihead has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    common.seed_everything(spec.seed)
    return _train(spec)


def _train(spec: RunSpec) -> RunResult:
    agent = build_agent()
    var_list1 = _variables(agent, "layer1", "layer2_1")
    if spec.twin == LEAKY:
        var_list2 = list(agent.trainable_variables)
    else:
        var_list2 = _variables(agent, "layer2_2")
    opt1 = keras.optimizers.Adam(1e-2)
    opt2 = keras.optimizers.Adam(1e-2)
    rec = recording.recorder(spec, {"Agent": agent}, RULES)

    @tf.function(reduce_retracing=True)
    def train_step(x, y1, y2):
        with rec.tape() as tape:
            p1, p2 = agent(x)
            loss1 = tf.reduce_mean(tf.square(y1 - p1))
            loss2 = tf.reduce_mean(tf.square(y2 - p2))
        gv1 = list(zip(tape.gradient(loss1, var_list1), var_list1))
        # Like TF1's minimize, skip variables the loss does not reach.
        gv2 = [(g, v) for g, v in zip(tape.gradient(loss2, var_list2), var_list2) if g is not None]
        rec.record_gradients({"loss1": gv1, "loss2": gv2}, losses={"loss1": loss1, "loss2": loss2})
        rec.apply(PerLossOptimizers(opt1, len(gv1), opt2), gv1 + gv2)
        return loss1, loss2

    x, y1, y2 = make_task(spec.seed)
    rng = np.random.default_rng(spec.seed)
    loss1 = loss2 = float("nan")
    for step in range(spec.steps):
        idx = rng.integers(0, len(x), size=BATCH)
        l1, l2 = train_step(x[idx], y1[idx], y2[idx])
        loss1, loss2 = float(l1), float(l2)
        spec.on_step(step + 1)
    rec.close()
    return RunResult({"loss1": loss1, "loss2": loss2})


DEMO = Demo(
    name="multihead",
    title="seed 01's Agent: layer1 feeds two heads; loss1 trains layer1 + layer2_1, loss2 only layer2_2 (var_list)",
    leak="loss2's optimizer built without var_list, so loss2 also trains the shared layer1",
    rules=RULES,
    train=train,
    default_steps=300,
)
