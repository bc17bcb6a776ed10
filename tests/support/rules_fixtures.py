"""Real training logs for the rules, CLI and testing-helper tests.

A shared-trunk actor-critic (`ac/trunk`, `ac/actor_head`, `ac/critic_head`)
trained on fixed random batches with the real Recorder, so the logs hold what
the analysis and the recorder really produced: the clean twin takes the
advantage under `tf.stop_gradient`, the leaky twin forgets it.
"""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from tb_gradscope.record import Recorder

OBS, ACTIONS, HIDDEN, BATCH = 4, 2, 8, 16
LEAK_RULE = "never(actor, ac/critic_head)"


def build_model() -> keras.Model:
    obs = keras.Input((OBS,), name="obs")
    h = keras.layers.Dense(HIDDEN, activation="tanh", name="trunk")(obs)
    logits = keras.layers.Dense(ACTIONS, name="actor_head")(h)
    value = keras.layers.Dense(1, name="critic_head")(h)
    return keras.Model(obs, [logits, value], name="ac")


def actor_critic_losses(model: keras.Model, s, a, returns, leaky: bool) -> dict:
    """{'actor', 'critic'} losses; the leaky twin lets the actor loss reach the critic head."""
    logits, value = model(s)
    advantage = returns - value[:, 0]
    if not leaky:
        advantage = tf.stop_gradient(advantage)
    log_prob = -tf.nn.sparse_softmax_cross_entropy_with_logits(labels=a, logits=logits)
    actor = -tf.reduce_mean(log_prob * advantage)
    critic = 0.5 * tf.reduce_mean(tf.square(returns - value[:, 0]))
    return {"actor": actor, "critic": critic}


def batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    s = rng.normal(size=(BATCH, OBS)).astype(np.float32)
    a = rng.integers(0, ACTIONS, size=(BATCH,)).astype(np.int32)
    returns = rng.normal(loc=1.0, size=(BATCH,)).astype(np.float32)
    return tf.constant(s), tf.constant(a), tf.constant(returns)


def write_actor_critic_run(
    run_dir: str, leaky: bool, steps: int = 4, every_n_steps: int = 2
) -> None:
    """Trains `steps` steps with the Recorder writing into `run_dir`."""
    keras.utils.set_random_seed(0)
    model = build_model()
    optimizer = keras.optimizers.SGD(0.05)
    rec = Recorder(logdir=run_dir, every_n_steps=every_n_steps, models={"ac": model})

    @tf.function
    def train_step(s, a, returns):
        with rec.tape() as tape:
            losses = actor_critic_losses(model, s, a, returns, leaky)
        rec.apply(optimizer, rec.gradients(tape, losses, model.trainable_variables))
        return losses

    s, a, returns = batch()
    for _ in range(steps):
        train_step(s, a, returns)
    rec.close()


_CACHE: dict[str, str] = {}


def actor_critic_logdir(tmp_path_factory) -> str:
    """One logdir with runs `leaky` and `clean`, written once per test session."""
    if "ac" not in _CACHE:
        root = tmp_path_factory.mktemp("actor_critic_logs")
        write_actor_critic_run(str(root / "leaky"), leaky=True)
        write_actor_critic_run(str(root / "clean"), leaky=False)
        _CACHE["ac"] = str(root)
    return _CACHE["ac"]


def stop_gradient_line() -> int:
    """The line of `tf.stop_gradient(advantage)` in this file (the clean twin's cut)."""
    import inspect

    lines, first = inspect.getsourcelines(actor_critic_losses)
    return first + next(i for i, line in enumerate(lines) if "tf.stop_gradient(advantage)" in line)


def write_records(run_dir: str, records: list) -> None:
    """Writes gradscope records as the recorder does (full metadata on a tag's
    first event only): `records` is [(info, step, payload[, layout])],
    payload a table array or a list of JSON documents, layout the tag's
    layout number (default 0)."""
    from tb_gradscope import format as fmt

    first_seen: set = set()
    writer = tf.summary.create_file_writer(run_dir)
    with writer.as_default():
        for info, step, payload, *layout in records:
            tag = fmt.tag_for(info.kind, info.name, *layout)
            metadata = (
                b"" if tag in first_seen else fmt.create_summary_metadata(info).SerializeToString()
            )
            first_seen.add(tag)
            if fmt.KIND_SPECS[info.kind].is_table:
                value = fmt.encode_table(info, payload)
            else:
                value = tf.constant(fmt.encode_blobs(info, payload))
            tf.summary.write(tag, value, step=step, metadata=metadata)
    writer.close()


DQN_SCOPES = ["online", "online/l1", "target", "target/l1"]


def dqn_records(leaky: bool, steps=(0, 10, 20)) -> list:
    """A DQN-like run: loss `td` trains `online`; the leaky twin also reaches
    `target` (the TD target lacks stop_gradient). FlowGraph + grad/update tables."""
    from tb_gradscope import format as fmt

    target_state = fmt.UPDATES if leaky else fmt.BLOCKED
    cells = {
        "td": {
            "online": fmt.UPDATES,
            "online/l1": fmt.UPDATES,
            "target": target_state,
            "target/l1": target_state,
        }
    }
    blocked = (
        []
        if leaky
        else [
            fmt.BlockedEdge(
                loss="td",
                producer="target/l1/MatMul",
                consumer="StopGradient",
                op_name="StopGradient",
                op_type="StopGradient",
                cause="stop_gradient",
                producer_scope="target/l1",
                consumer_scope="loss:td",
                source=fmt.SourceLine("train.py", 42, "train_step"),
            )
        ]
    )
    flowgraph = fmt.FlowGraph(
        losses=[fmt.LossInfo("td")],
        scopes=list(DQN_SCOPES),
        cells=cells,
        blocked_edges=blocked,
        nodes=[fmt.GraphNode(s, "scope", s) for s in ("online/l1", "target/l1")]
        + [fmt.GraphNode("loss:td", "loss", "td")],
        edges=[
            fmt.GraphEdge("online/l1", "loss:td", 1),
            fmt.GraphEdge("target/l1", "loss:td", 1, () if leaky else ("td",)),
        ],
        applied=["online", "online/l1"] + (["target", "target/l1"] if leaky else []),
        source="tf2",
    )
    grads = fmt.make_info(fmt.Kind.GRAD_STATS, "td", DQN_SCOPES)
    updates = fmt.make_info(fmt.Kind.UPDATE_STATS, "", DQN_SCOPES)
    records = [(fmt.make_info(fmt.Kind.FLOWGRAPH), steps[0], [flowgraph.to_json()])]
    for i, step in enumerate(steps):
        leak = 0.25 * (i + 1) if leaky else 0.0
        on = [2.0, 1.0 + i, 0.5, 0.0, 0.0]
        off = [2.0 if leaky else 0.0, leak, leak, 0.0, 0.0]
        records.append((grads, step, [on, on, off, off]))
        records.append((updates, step, [[0.1, 3.0]] * 2 + [[0.1 if leaky else 0.0, 3.0]] * 2))
    return records


def dqn_logdir(root) -> str:
    """runs `leaky` and `clean` of `dqn_records`, plus `recorded`: a run whose
    recorder wrote a violation event (with a hostile scope name) itself."""
    from tb_gradscope import format as fmt

    write_records(str(root / "leaky"), dqn_records(True))
    write_records(str(root / "clean"), dqn_records(False))
    event = fmt.Event(
        type=fmt.VIOLATION,
        name="never(td, target/*)",
        step=30,
        message="loss 'td' reaches scope 'target/\x1b[31mred'",
        loss="td",
        scope="target/\x1b[31mred",
        evidence={"l2": 0.5},
    )
    write_records(
        str(root / "recorded"),
        dqn_records(False, steps=(30,))
        + [
            (fmt.make_info(fmt.Kind.EVENTS), 30, [event.to_json()]),
        ],
    )
    return str(root)


def write_drift_run(
    run_dir: str, tau_used: float, declared_tau: float, frozen: bool = False, steps: int = 40
) -> None:
    """Two same-architecture models; the target follows the online one by an
    EMA of rate `tau_used` (or not at all), recorded by the real DriftMonitor."""
    from tb_gradscope.pairs import pair_models
    from tb_gradscope.record import DriftMonitor

    keras.utils.set_random_seed(0)

    def net(name: str) -> keras.Model:
        x = keras.Input((4,))
        return keras.Model(x, keras.layers.Dense(3, name="l1")(x), name=name)

    online, target = net("online"), net("target")
    target.set_weights(online.get_weights())
    monitor = DriftMonitor(
        [pair_models(target, online, tau=declared_tau)], logdir=run_dir, every_n_steps=5
    )
    rng = np.random.default_rng(0)
    for _ in range(steps):
        for v in online.trainable_variables:
            v.assign_add(0.05 * rng.normal(size=v.shape).astype(np.float32))
        if not frozen:
            for t, o in zip(target.trainable_variables, online.trainable_variables):
                t.assign(t + tau_used * (o - t))
        monitor.record()
    monitor.close()
