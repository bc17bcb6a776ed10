"""Demo `ema_lstm`: an LSTM value network and a target LSTM kept as its EMA (seed 03).

The online LSTM learns the discounted sum of a noisy sine's future values by
TD; the TD target comes from a target LSTM under `tf.stop_gradient`, and after
every optimizer step the target moves by Polyak averaging (assign ops,
`target <- decay * target + (1 - decay) * online`). The clean twin first
copies the online weights into the target (the seed answer's "Change0"); the
leaky twin skips that copy, so the target starts unrelated to the online net
and only slowly tracks it: early TD targets are noise.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.demos import common, recording
from tb_gradscope.demos.spec import CLEAN, LEAKY, Demo, RunResult, RunSpec
from tb_gradscope.pairs import pair_models

GAMMA = 0.9
DECAY = 0.99
WINDOW = 8
UNITS = 16
BATCH = 32

RULES = (
    "never(td, target/*)",
    f"tracks(target, online, tau={1.0 - DECAY:g})",
)


def build_value_lstm(name: str) -> keras.Model:
    """A window of observations -> LSTM -> a scalar value."""
    x = keras.Input((WINDOW, 1), name=f"{name}_window")
    h = keras.layers.LSTM(UNITS, name="lstm")(x)
    v = keras.layers.Dense(1, name="v")(h)
    return keras.Model(x, v, name=name)


def sample_windows(rng: np.random.Generator, batch: int) -> tuple[np.ndarray, ...]:
    """Windows s and s2 (s shifted by one) of noisy sines, and the reward between them."""
    t = np.arange(WINDOW + 1, dtype=np.float32)
    freq = rng.uniform(0.2, 0.6, size=(batch, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(batch, 1))
    x = np.sin(freq * t + phase) + 0.05 * rng.normal(size=(batch, WINDOW + 1))
    x = x.astype(np.float32)[..., None]
    return x[:, :WINDOW], x[:, WINDOW, 0], x[:, 1:]


def train(spec: RunSpec) -> RunResult:
    """Trains one twin: an Adam step on the TD loss, then the EMA target update."""
    if spec.twin not in (CLEAN, LEAKY):
        raise ValueError(f"ema_lstm has twins {CLEAN!r} and {LEAKY!r}, not {spec.twin!r}")
    common.seed_everything(spec.seed)
    return _train(spec)


def _train(spec: RunSpec) -> RunResult:
    online = build_value_lstm("online")
    target = build_value_lstm("target")
    if spec.twin == CLEAN:
        common.hard_copy(online, target)  # the seed's "Change0"
    optimizer = keras.optimizers.Adam(3e-3)
    variables = online.trainable_variables
    rec = recording.recorder(
        spec,
        {"online": online, "target": target},
        RULES,
        [pair_models(target, online, tau=1.0 - DECAY)],
    )

    @tf.function(reduce_retracing=True)
    def train_step(s, r, s2):
        with rec.tape() as tape:
            v_target = tf.stop_gradient(r + GAMMA * target(s2)[:, 0])
            td = tf.reduce_mean(tf.square(v_target - online(s)[:, 0]))
        rec.apply(optimizer, rec.gradients(tape, {"td": td}, variables))
        common.ema_update(online, target, DECAY)
        rec.record_drift()
        return td

    rng = np.random.default_rng(spec.seed)
    td = float("nan")
    for step in range(spec.steps):
        td = float(train_step(*sample_windows(rng, BATCH)))
        spec.on_step(step + 1)
    rec.close()
    gap = np.sqrt(
        sum(
            np.sum((t.numpy() - o.numpy()) ** 2)
            for t, o in zip(common.weights(target), common.weights(online))
        )
    )
    return RunResult({"td": td}, f"final ||target - online|| = {gap:.3f}")


DEMO = Demo(
    name="ema_lstm",
    title="LSTM value net with an EMA target LSTM (Polyak averaging by assign ops)",
    leak="target LSTM not initialised from the online LSTM (the seed's missing 'Change0')",
    rules=RULES,
    train=train,
    default_steps=300,
)
