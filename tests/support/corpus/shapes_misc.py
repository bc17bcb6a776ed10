"""The seeds' shapes and the plumbing variants of a training step.

- multihead (seed 01, TF2): a shared layer and two heads, one optimizer per
  loss with its own var_list; mutant: loss2's optimizer without a var_list.
- start_point (seed 02): DQN 3.0's update, the gradient started at q_all with
  the clipped TD error as output gradients; mutant: the squared TD error
  differentiated through the target network, optimizer over everything.
- ema_lstm (seed 03): an LSTM value network and its EMA target.
- auto_names: Keras functional models with automatic names (functional_N,
  dense_N), named by `models=` keys and `pair_models(roots=...)`.
- subclassed: a subclassed Keras model whose auxiliary head reads the encoder
  behind stop_gradient; mutant: without it.
- grad_accumulation: gradients of two micro-batches summed, recorded with
  `record_gradients`, a frozen (trainable=False) layer in the model.
- clip_global_norm: `tf.clip_by_global_norm` between the gradients and the
  apply; mutant: the second head without its stop_gradient.
- eager_analyzed / eager_plain: a loop without tf.function, traced once with
  `rec.analyze` or not at all (no FlowGraph: `no_gradient` is then expected);
  mutants: no stop_gradient, optimizer over the target too.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from tb_gradscope.pairs import pair_models
from tb_gradscope.record import Recorder, StartPoint
from tests.support.corpus import kit
from tests.support.corpus.spec import (
    EAGER,
    TF_FUNCTION,
    Forward,
    LossProbe,
    Shape,
    StepProbe,
    watched_twin,
)

GAMMA, TAU = 0.9, 0.1


def _probe(losses, models, optimizers, pairs=()):
    return StepProbe(losses, kit.variables_of(models), optimizers, pairs)


# ----- seed 01: multi-head Agent with per-loss var_lists ----------------------------

MULTIHEAD_RULES = (
    "never(loss2, Agent/layer1)",
    "only(loss2, [Agent/layer2_2])",
    "never(loss1, Agent/layer2_2)",
)


def _multihead(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(11)
        x = keras.Input((kit.OBS,))
        s = keras.layers.Dense(4, activation="tanh", name="layer1")(x)
        agent = keras.Model(
            x,
            [keras.layers.Dense(1, name="layer2_1")(s), keras.layers.Dense(1, name="layer2_2")(s)],
            name="Agent",
        )
        opt1, opt2 = keras.optimizers.Adam(0.01), keras.optimizers.Adam(0.01)
        rec = Recorder(
            logdir, every_n_steps=1, models={"Agent": agent}, rules=list(MULTIHEAD_RULES)
        )
        layer = agent.get_layer

        def vars1():
            return layer("layer1").trainable_variables + layer("layer2_1").trainable_variables

        def vars2():
            return agent.trainable_variables if leaky else layer("layer2_2").trainable_variables

        def losses(b):
            y1, y2 = agent(b["s"])
            return {
                "loss1": tf.reduce_mean(tf.square(y1 - b["y"])),
                "loss2": tf.reduce_mean(tf.square(y2 + b["y"])),
            }

        @tf.function
        def train_step(b):
            with rec.training_step():
                with rec.tape() as tape:
                    named = losses(b)
                rec.apply(opt1, rec.gradients(tape, {"loss1": named["loss1"]}, vars1()))
                rec.apply(opt2, rec.gradients(tape, {"loss2": named["loss2"]}, vars2()))

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape(persistent=True) as tape:
                named = losses(b)
                loss1, loss2 = named["loss1"], named["loss2"]
            v1, v2 = vars1(), vars2()
            opt1.apply_gradients(zip(tape.gradient(loss1, v1), v1))
            opt2.apply_gradients(zip(tape.gradient(loss2, v2), v2))

        if watched:
            train_step = rec.watch(watched_step)

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            "loss1", kit.taped(lambda _: losses(b)["loss1"]), opt1, vars1
                        ),
                        kit.loss_probe(
                            "loss2", kit.taped(lambda _: losses(b)["loss2"]), opt2, vars2
                        ),
                    ],
                    {"Agent": agent},
                    [opt1, opt2],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- seed 02: gradient start point with output gradients ----------------------------

START_RULES = ("never(td, target/*)", "only(td, [online])")
CLIP = 1.0


def _start_point(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(12)
        online, target = kit.mlp("online", [4, kit.ACTIONS]), kit.mlp("target", [4, kit.ACTIONS])
        kit.copy_weights(target, online)
        opt = keras.optimizers.RMSprop(0.01)
        models = {"online": online, "target": target}
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(START_RULES))

        def var_list():
            return online.trainable_variables + (target.trainable_variables if leaky else [])

        def start(b):
            q_all = online(b["s"])
            q2 = tf.reduce_max(target(b["s2"]), axis=1)
            q = tf.gather(q_all, b["a"], axis=1, batch_dims=1)
            delta = tf.clip_by_value(b["r"] + GAMMA * (1.0 - b["done"]) * q2 - q, -CLIP, CLIP)
            if leaky:
                return tf.reduce_mean(tf.square(delta)), None
            targets = tf.one_hot(b["a"], kit.ACTIONS) * delta[:, None]
            return q_all, -tf.stop_gradient(targets) / kit.BATCH

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                value, seed = start(b)
            loss = value if seed is None else StartPoint(value, output_gradients=seed)
            rec.apply(opt, rec.gradients(tape, {"td": loss}, var_list()))

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                td, seed = start(b)
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(td, variables, output_gradients=seed), variables))

        if watched:
            train_step = rec.watch(watched_step)

        def forward(b):
            with tf.GradientTape() as tape:
                value, seed = start(b)
            return Forward(tape, value, seed)

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe([kit.loss_probe("td", lambda: forward(b), opt, var_list)], models, [opt]),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- seed 03: EMA LSTM -------------------------------------------------------------

LSTM_RULES = ("never(td, target/*)", "blocked(td, target/*)")
SEQ = 4


def _lstm(name: str) -> keras.Sequential:
    return keras.Sequential(
        [
            keras.Input((SEQ, kit.OBS)),
            keras.layers.LSTM(3, name="lstm"),
            keras.layers.Dense(1, name="value"),
        ],
        name=name,
    )


def _ema_lstm(watched: bool = False):
    def train(logdir, observer):
        kit.seed(13)
        online, target = _lstm("online"), _lstm("target")
        kit.copy_weights(target, online)
        opt = keras.optimizers.Adam(0.01)
        models = {"online": online, "target": target}
        pair = pair_models(target, online, tau=TAU)
        rec = Recorder(logdir, every_n_steps=1, models=models, pairs=[pair], rules=list(LSTM_RULES))

        def seqs(b):
            s = tf.reshape(tf.tile(b["s"], [1, SEQ]), [-1, SEQ, kit.OBS])
            return s, s + 0.1 * tf.reshape(tf.tile(b["s2"], [1, SEQ]), [-1, SEQ, kit.OBS])

        def td_loss(b, v2):
            s, _ = seqs(b)
            return tf.reduce_mean(tf.square(b["r"] + GAMMA * v2 - online(s)[:, 0]))

        def next_value(b):
            return target(seqs(b)[1])[:, 0]

        @tf.function
        def train_step(b):
            v2 = next_value(b)
            with rec.tape() as tape:
                td = td_loss(b, v2)
            rec.apply(opt, rec.gradients(tape, {"td": td}, online.trainable_variables))
            kit.polyak(target, online, TAU)
            rec.record_drift()

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            v2 = next_value(b)
            with tf.GradientTape() as tape:
                td = td_loss(b, v2)
            variables = online.trainable_variables
            opt.apply_gradients(zip(tape.gradient(td, variables), variables))
            kit.polyak(target, online, TAU)

        if watched:
            train_step = rec.watch(watched_step)

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            "td",
                            kit.taped(lambda v2: td_loss(b, v2), lambda: next_value(b)),
                            opt,
                            lambda: online.trainable_variables,
                        )
                    ],
                    models,
                    [opt],
                    [kit.pair_probe(pair, target, online, "target")],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- Keras functional models with automatic names ------------------------------------

AUTO_RULES = ("never(td, q_target/*)", "blocked(td, q_target/*)")


def _functional_q() -> keras.Model:
    x = keras.Input((kit.OBS,))
    h = keras.layers.Dense(4, activation="tanh")(x)
    return keras.Model(x, keras.layers.Dense(kit.ACTIONS)(h))


def _auto_names(watched: bool = False):
    def train(logdir, observer):
        kit.seed(14)
        q, q_target = _functional_q(), _functional_q()
        kit.copy_weights(q_target, q)
        opt = keras.optimizers.SGD(0.1)
        models = {"q": q, "q_target": q_target}
        pair = pair_models(q_target, q, tau=TAU, roots=("q_target", "q"))
        rec = Recorder(logdir, every_n_steps=1, models=models, pairs=[pair], rules=list(AUTO_RULES))

        def td_loss(b):
            y = tf.stop_gradient(b["r"] + GAMMA * tf.reduce_max(q_target(b["s2"]), axis=1))
            return tf.reduce_mean(tf.square(y - tf.gather(q(b["s"]), b["a"], axis=1, batch_dims=1)))

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                td = td_loss(b)
            rec.apply(opt, rec.gradients(tape, {"td": td}, q.trainable_variables))
            kit.polyak(q_target, q, TAU)
            rec.record_drift()

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                td = td_loss(b)
            opt.apply_gradients(
                zip(tape.gradient(td, q.trainable_variables), q.trainable_variables)
            )
            kit.polyak(q_target, q, TAU)

        if watched:
            train_step = rec.watch(watched_step)

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            "td",
                            kit.taped(lambda _: td_loss(b)),
                            opt,
                            lambda: q.trainable_variables,
                        )
                    ],
                    models,
                    [opt],
                    [kit.pair_probe(pair, q_target, q, "q_target")],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- a subclassed Keras model ------------------------------------------------------

SUB_RULES = ("never(aux, net/encoder)", "blocked(aux, net/encoder)")


class Net(keras.Model):
    """An encoder, a main head and an auxiliary head (behind stop_gradient unless leaky)."""

    def __init__(self, leaky: bool):
        super().__init__(name="net")
        self.leaky = leaky
        self.encoder = keras.layers.Dense(4, activation="tanh", name="encoder")
        self.head = keras.layers.Dense(1, name="head")
        self.aux_head = keras.layers.Dense(1, name="aux_head")

    def call(self, x):
        h = self.encoder(x)
        return self.head(h), self.aux_head(h if self.leaky else tf.stop_gradient(h))


def _subclassed(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(15)
        net = Net(leaky)
        net(kit.batch(0)["s"])
        opt = keras.optimizers.Adam(0.01)
        rec = Recorder(logdir, every_n_steps=1, models={"net": net}, rules=list(SUB_RULES))

        def losses(b):
            main, aux = net(b["s"])
            return {
                "main": tf.reduce_mean(tf.square(main - b["y"])),
                "aux": tf.reduce_mean(tf.square(aux - b["r"][:, None])),
            }

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                named = losses(b)
            rec.apply(opt, rec.gradients(tape, named, net.trainable_variables))

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                named = losses(b)
                main, aux = named["main"], named["aux"]
                loss = main + aux
            variables = net.trainable_variables
            opt.apply_gradients(zip(tape.gradient(loss, variables), variables))

        if watched:  # the summed loss's terms, each a loss of its own
            train_step = rec.watch(watched_step, losses={"loss": ["main", "aux"]})

        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [
                        kit.loss_probe(
                            n,
                            kit.taped(lambda _, n=n: losses(b)[n]),
                            opt,
                            lambda: net.trainable_variables,
                        )
                        for n in ("main", "aux")
                    ],
                    {"net": net},
                    [opt],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- gradient accumulation over micro-batches -----------------------------------------

ACC_RULES = ("never(mse, net/frozen)", "only(mse, [net/l1, net/l2])")


def _accumulation(watched: bool = False):
    def train(logdir, observer):
        kit.seed(16)
        net = keras.Sequential(
            [
                keras.Input((kit.OBS,)),
                keras.layers.Dense(4, activation="tanh", name="l1"),
                keras.layers.Dense(4, activation="tanh", name="frozen", trainable=False),
                keras.layers.Dense(1, name="l2"),
            ],
            name="net",
        )
        opt = keras.optimizers.SGD(0.05)
        rec = Recorder(logdir, every_n_steps=1, models={"net": net}, rules=list(ACC_RULES))

        def micro_loss(b, half):
            rows = slice(0, kit.BATCH // 2) if half == 0 else slice(kit.BATCH // 2, kit.BATCH)
            return tf.reduce_mean(tf.square(net(b["s"][rows]) - b["y"][rows])) / 2.0

        @tf.function
        def train_step(b):
            variables = net.trainable_variables
            total, losses = [tf.zeros_like(v) for v in variables], []
            for half in (0, 1):
                with tf.GradientTape() as tape:
                    loss = micro_loss(b, half)
                losses.append(loss)
                total = [t + g for t, g in zip(total, tape.gradient(loss, variables))]
            grads_and_vars = list(zip(total, variables))
            rec.record_gradients({"mse": grads_and_vars}, losses={"mse": losses[0] + losses[1]})
            rec.apply(opt, grads_and_vars)

        def watched_step(b):  # the step as its user writes it, under @rec.watch
            variables = net.trainable_variables
            total = [tf.zeros_like(v) for v in variables]
            for half in (0, 1):
                with tf.GradientTape() as tape:
                    loss = micro_loss(b, half)
                total = [t + g for t, g in zip(total, tape.gradient(loss, variables))]
            opt.apply_gradients(zip(total, variables))

        if watched:  # one line in a loop: one loss
            train_step = rec.watch(watched_step, losses={"loss": "mse"})

        for step in range(4):
            b = kit.batch(step)
            forward = kit.taped(lambda _: micro_loss(b, 0) + micro_loss(b, 1))
            observer.before(
                step,
                _probe(
                    [kit.loss_probe("mse", forward, opt, lambda: net.trainable_variables)],
                    {"net": net},
                    [opt],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- clip_by_global_norm between gradient and apply -------------------------------------

CLIP_RULES = ("never(b, net/trunk)", "only(b, [net/head_b])")


def _clip(leaky: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(17)
        x = keras.Input((kit.OBS,))
        h = keras.layers.Dense(4, activation="tanh", name="trunk")(x)
        out_a = keras.layers.Dense(1, name="head_a")(h)
        out_b = keras.layers.Dense(1, name="head_b")(h if leaky else keras.ops.stop_gradient(h))
        net = keras.Model(x, [out_a, out_b], name="net")
        opt = keras.optimizers.SGD(0.1)
        rec = Recorder(logdir, every_n_steps=1, models={"net": net}, rules=list(CLIP_RULES))

        def losses(b):
            a, bb = net(b["s"])
            return {
                "a": tf.reduce_mean(tf.square(a - b["y"])),
                "b": tf.reduce_mean(tf.square(bb + b["y"])),
            }

        @tf.function
        def train_step(b):
            with rec.tape() as tape:
                named = losses(b)
            grads_and_vars = rec.gradients(tape, named, net.trainable_variables)
            clipped, _ = tf.clip_by_global_norm([g for g, _ in grads_and_vars], 0.5)
            rec.apply(opt, list(zip(clipped, [v for _, v in grads_and_vars])))

        def watched_step(batch):  # the step as its user writes it, under @rec.watch
            with tf.GradientTape() as tape:
                named = losses(batch)
                a, b = named["a"], named["b"]
                loss = a + b
            variables = net.trainable_variables
            clipped, _ = tf.clip_by_global_norm(tape.gradient(loss, variables), 0.5)
            opt.apply_gradients(zip(clipped, variables))

        if watched:  # the summed loss's terms, each a loss of its own
            train_step = rec.watch(watched_step, losses={"loss": ["a", "b"]})

        def probe(n, b):
            forward = kit.taped(lambda _: losses(b)[n])

            def update():
                f = forward()
                grads = f.tape.gradient(f.value, net.trainable_variables)
                clipped, _ = tf.clip_by_global_norm(grads, 0.5)
                kit.built(opt, net.trainable_variables).apply_gradients(
                    [(g, v) for g, v in zip(clipped, net.trainable_variables) if g is not None]
                )

            return LossProbe(n, forward, update)

        for step in range(4):
            b = kit.batch(step)
            observer.before(step, _probe([probe("a", b), probe("b", b)], {"net": net}, [opt]))
            train_step(b)
            observer.after(step)
        rec.close()

    return train


# ----- eager loops ---------------------------------------------------------------------

EAGER_RULES = ("never(td, target/*)", "only(td, [online])")


def _eager(leaky: bool, analyze: bool, watched: bool = False):
    def train(logdir, observer):
        kit.seed(18)
        online, target = kit.mlp("online", [4, kit.ACTIONS]), kit.mlp("target", [4, kit.ACTIONS])
        kit.copy_weights(target, online)
        opt = keras.optimizers.SGD(0.1)
        models = {"online": online, "target": target}
        rec = Recorder(logdir, every_n_steps=1, models=models, rules=list(EAGER_RULES))

        def var_list():
            return online.trainable_variables + (target.trainable_variables if leaky else [])

        def td_loss(b):
            y = b["r"] + GAMMA * tf.reduce_max(target(b["s2"]), axis=1)
            if not leaky:
                y = tf.stop_gradient(y)
            return tf.reduce_mean(
                tf.square(y - tf.gather(online(b["s"]), b["a"], axis=1, batch_dims=1))
            )

        def train_step(b):
            with rec.tape() as tape:
                td = td_loss(b)
            rec.apply(opt, rec.gradients(tape, {"td": td}, var_list()))

        def watched_step(b):  # the step as its user writes it, under @rec.watch(eager=True)
            with tf.GradientTape() as tape:
                td = td_loss(b)
            variables = var_list()
            opt.apply_gradients(zip(tape.gradient(td, variables), variables))

        if watched:
            train_step = rec.watch(watched_step, eager=True)
        if analyze:
            rec.analyze(train_step, kit.batch(0))
        for step in range(4):
            b = kit.batch(step)
            observer.before(
                step,
                _probe(
                    [kit.loss_probe("td", kit.taped(lambda _: td_loss(b)), opt, var_list)],
                    models,
                    [opt],
                ),
            )
            train_step(b)
            observer.after(step)
        rec.close()

    return train


SHAPES = [
    Shape(
        "multihead",
        TF_FUNCTION,
        _multihead(False),
        MULTIHEAD_RULES,
        note="seed 01: shared layer, two heads, one optimizer per loss with its var_list",
    ),
    Shape(
        "multihead_leaky",
        TF_FUNCTION,
        _multihead(True),
        MULTIHEAD_RULES,
        advice=("var_list",),
        mutant_of="multihead",
        note="loss2's optimizer without var_list",
    ),
    Shape(
        "start_point",
        TF_FUNCTION,
        _start_point(False),
        START_RULES,
        note="seed 02: gradient started at q_all with the clipped TD error as output gradients",
    ),
    Shape(
        "start_point_leaky",
        TF_FUNCTION,
        _start_point(True),
        START_RULES,
        mutant_of="start_point",
        note="squared TD error through the target network, optimizer over everything",
    ),
    Shape(
        "ema_lstm",
        TF_FUNCTION,
        _ema_lstm(),
        LSTM_RULES,
        note="seed 03: LSTM value network, EMA target LSTM evaluated before the tape",
    ),
    Shape(
        "auto_names",
        TF_FUNCTION,
        _auto_names(),
        AUTO_RULES,
        note="Keras functional models with automatic names, models= keys and pair roots",
    ),
    Shape(
        "subclassed",
        TF_FUNCTION,
        _subclassed(False),
        SUB_RULES,
        note="subclassed Keras model, auxiliary head behind stop_gradient",
    ),
    Shape(
        "subclassed_leaky",
        TF_FUNCTION,
        _subclassed(True),
        SUB_RULES,
        advice=("stop_gradient",),
        mutant_of="subclassed",
        note="auxiliary head without stop_gradient",
    ),
    Shape(
        "grad_accumulation",
        TF_FUNCTION,
        _accumulation(),
        ACC_RULES,
        note="two micro-batches' gradients summed, record_gradients, a trainable=False layer",
    ),
    Shape(
        "clip_global_norm",
        TF_FUNCTION,
        _clip(False),
        CLIP_RULES,
        note="clip_by_global_norm between rec.gradients and rec.apply",
    ),
    Shape(
        "clip_global_norm_leaky",
        TF_FUNCTION,
        _clip(True),
        CLIP_RULES,
        advice=("stop_gradient",),
        mutant_of="clip_global_norm",
        note="second head without stop_gradient",
    ),
    Shape(
        "eager_analyzed",
        EAGER,
        _eager(False, True),
        EAGER_RULES,
        note="eager loop, traced once with rec.analyze",
    ),
    Shape(
        "eager_analyzed_leaky",
        EAGER,
        _eager(True, True),
        EAGER_RULES,
        mutant_of="eager_analyzed",
        note="no stop_gradient, optimizer over the target",
    ),
    Shape(
        "eager_plain",
        EAGER,
        _eager(False, False),
        EAGER_RULES,
        has_flowgraph=False,
        note="eager loop never traced: no FlowGraph",
    ),
    Shape(
        "eager_plain_leaky",
        EAGER,
        _eager(True, False),
        EAGER_RULES,
        mutant_of="eager_plain",
        has_flowgraph=False,
        note="no stop_gradient, optimizer over the target",
    ),
]


# The shapes written as their users write them, under `@rec.watch`
# (tests/e2e/corpus/test_watched_corpus.py; not corpus shapes of their own).
# The eager loops stay eager (`@rec.watch(eager=True)`), eager_analyzed's
# FlowGraph from `rec.analyze` of the watched step.
_BUILDERS = {
    "multihead": lambda leaky: _multihead(leaky, watched=True),
    "start_point": lambda leaky: _start_point(leaky, watched=True),
    "ema_lstm": lambda _: _ema_lstm(watched=True),
    "auto_names": lambda _: _auto_names(watched=True),
    "subclassed": lambda leaky: _subclassed(leaky, watched=True),
    "grad_accumulation": lambda _: _accumulation(watched=True),
    "clip_global_norm": lambda leaky: _clip(leaky, watched=True),
    "eager_analyzed": lambda leaky: _eager(leaky, True, watched=True),
    "eager_plain": lambda leaky: _eager(leaky, False, watched=True),
}
WATCHED = [
    watched_twin(shape, _BUILDERS[shape.mutant_of or shape.name](shape.mutant_of is not None))
    for shape in SHAPES
]
