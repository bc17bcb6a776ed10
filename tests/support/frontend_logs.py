"""Logs for the Gradscope tab's tests: recorded by the real Recorder, or hand-written.

`DqnTrainer` trains a tiny DQN under `tb_gradscope.record.Recorder`. `RunSpec`
runs are hand-written event files (`tf.summary.write` + the `tb_gradscope.format`
contract) for what a healthy training loop does not produce on demand: names
that are HTML, and every flow state (ignored, vanishing, nonfinite, a violation)
side by side. A RunSpec also says what it holds, for the tests to compare.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

from tb_gradscope import format as fmt

HOSTILE = "<img src=x onerror=alert(1)>"
NO_GRADIENT_ROW = (0.0, 0.0, 0.0, 0.0, 0.0)


def grad_row(l2: float, grad_vars: int = 2, nonfinite: float = 0.0) -> tuple[float, ...]:
    """A grad_stats row: (grad_vars, l2, max_abs, nonfinite, zero_frac)."""
    return (float(grad_vars), l2, l2 / 3.0, nonfinite, 0.0)


@dataclasses.dataclass(frozen=True)
class DriftSpec:
    """A drift record: per step, one (drift, distance, online_norm, target_step, tau) row per scope."""

    name: str
    attrs: Mapping[str, object]
    scopes: tuple[str, ...]
    rows: Mapping[int, tuple[tuple[float, ...], ...]]


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A hand-written run, the same at every step.

    Attributes:
      name: the run's directory name (untrusted text on the page).
      scopes: the scope tree in tree order (parents before children).
      static: the FlowGraph's state per loss and scope; losses absent here have
        no static state.
      grads: per loss and scope, the grad_stats row.
      updates: per scope, (update_norm, weight_norm).
      events: written at the last step.
      steps: the recorded steps.
      start_points: losses the FlowGraph calls gradient start points.
      nodes, edges, blocked: the FlowGraph's scope graph and blocked edges.
      flowgraph: False for a run with no FlowGraph at all (an eager loop
        whose step was never traced).
      drift: drift records written at every step.
      rules: the rules the run was trained with (in its FLOWGRAPH and
        GRAD_STATS metadata, as the Recorder writes them).
    """

    name: str
    scopes: tuple[str, ...]
    static: Mapping[str, Mapping[str, str]]
    grads: Mapping[str, Mapping[str, tuple[float, ...]]]
    updates: Mapping[str, tuple[float, float]]
    events: tuple[fmt.Event, ...] = ()
    steps: tuple[int, ...] = (0, 10)
    start_points: tuple[str, ...] = ()
    nodes: tuple[fmt.GraphNode, ...] = ()
    edges: tuple[fmt.GraphEdge, ...] = ()
    blocked: tuple[fmt.BlockedEdge, ...] = ()
    flowgraph: bool = True
    drift: tuple[DriftSpec, ...] = ()
    rules: tuple[str, ...] = ()

    @property
    def rule_attrs(self) -> dict[str, list[str]]:
        return {"rules": list(self.rules)} if self.rules else {}


def hostile_spec() -> RunSpec:
    """Run, loss, scope, op, file and event names that are HTML: they must show as text.

    Its scope graph: input -> the leaf scope -> the loss, that last edge blocked
    by an op whose name, type and source file are HTML too; one violation whose
    name and message are HTML.
    """
    root = f"net{HOSTILE}"
    scopes = (root, f"{root}/{HOSTILE}")
    leaf, loss_node, input_node = scopes[-1], f"loss:{HOSTILE}", f"input:{HOSTILE}"
    blocked = fmt.BlockedEdge(
        loss=HOSTILE,
        producer=HOSTILE,
        consumer=HOSTILE,
        op_name=HOSTILE,
        op_type=HOSTILE,
        cause="stop_gradient",
        producer_scope=leaf,
        consumer_scope=loss_node,
        source=fmt.SourceLine(file=f"{HOSTILE}.py", line=7, function=HOSTILE),
    )
    violation = fmt.Event(
        type=fmt.VIOLATION, name=HOSTILE, step=10, message=HOSTILE, loss=HOSTILE, scope=leaf
    )
    return RunSpec(
        name=HOSTILE,
        scopes=scopes,
        static={HOSTILE: {s: fmt.UPDATES for s in scopes}},
        grads={HOSTILE: {s: grad_row(0.3) for s in scopes}},
        updates={s: (0.01, 2.0) for s in scopes},
        events=(violation,),
        nodes=(
            fmt.GraphNode(id=leaf, kind="scope", label=leaf),
            fmt.GraphNode(id=input_node, kind="input", label=HOSTILE),
            fmt.GraphNode(id=loss_node, kind="loss", label=HOSTILE),
        ),
        edges=(
            fmt.GraphEdge(src=input_node, dst=leaf, tensors=1),
            fmt.GraphEdge(src=leaf, dst=loss_node, tensors=1, blocked_for=(HOSTILE,)),
        ),
        blocked=(blocked,),
    )


# Names that must show escaped (as `tb-gradscope report` prints them) and
# ellipsised: bidi overrides and marks, C0 and C1 controls, 300 characters.
LONG_RUN = "long_" + "r" * 150 + "/\u202e" + "n" * 150
LONG_SCOPE = "net/" + "s" * 300
BIDI_SCOPE = "net/evil\u202egnp.exe\u202d"
CONTROL_SCOPE = "net/ctl\x1b[31m\x85\x9b\u200fend"
LONG_LOSS = "l" * 300
BIDI_LOSS = "loss\u202dlr\x07"


def long_names_spec() -> RunSpec:
    """A run whose run, scope, loss, event and graph names are 300 characters long or
    hold bidi and control characters; one blocked edge and one event per hostile name."""
    leaves = (LONG_SCOPE, BIDI_SCOPE, CONTROL_SCOPE)
    scopes = ("net",) + leaves
    losses = (LONG_LOSS, BIDI_LOSS)
    input_node = "input:" + "x" * 300
    nodes = [fmt.GraphNode(id=s, kind="scope", label=s) for s in leaves]
    nodes += [fmt.GraphNode(id=input_node, kind="input", label=input_node[6:])]
    nodes += [fmt.GraphNode(id=f"loss:{loss}", kind="loss", label=loss) for loss in losses]
    edges = [fmt.GraphEdge(src=input_node, dst=s, tensors=1) for s in leaves]
    edges += [
        fmt.GraphEdge(
            src=s,
            dst=f"loss:{loss}",
            tensors=1,
            blocked_for=(BIDI_LOSS,) if s == LONG_SCOPE and loss == BIDI_LOSS else (),
        )
        for s in leaves
        for loss in losses
    ]
    blocked = fmt.BlockedEdge(
        loss=BIDI_LOSS,
        producer=LONG_SCOPE + "/read",
        consumer="StopGradient\u202e",
        op_name="stop\u202egrad" + "o" * 300,
        op_type="StopGradient",
        cause="stop_gradient",
        producer_scope=LONG_SCOPE,
        consumer_scope=f"loss:{BIDI_LOSS}",
        source=fmt.SourceLine(file="train\u202eyp.py", line=3, function="step"),
    )
    events = tuple(
        fmt.Event(
            type=fmt.VIOLATION,
            name=f"never({loss}, {scope})",
            step=10,
            message=f"loss '{loss}' reaches scope '{scope}'",
            loss=loss,
            scope=scope,
            pair="t" * 300 + "<-online",
        )
        for loss in losses
        for scope in leaves
    )
    return RunSpec(
        name=LONG_RUN,
        scopes=scopes,
        static={loss: {s: fmt.UPDATES for s in scopes} for loss in losses},
        grads={loss: {s: grad_row(0.5) for s in scopes} for loss in losses},
        updates={s: (0.01, 2.0) for s in scopes},
        events=events,
        nodes=tuple(nodes),
        edges=tuple(edges),
        blocked=(blocked,),
    )


def states_spec() -> RunSpec:
    """One loss whose cells go through every flow state, plus one violation.

    `main` is a gradient start point (a tensor and its output gradients).
    `probe` is absent from the FlowGraph, so its missing gradients can only be
    "no_gradient" (nothing tells blocked from independent).
    """
    scopes = ("net", "net/blocked", "net/ignored", "net/nonfinite", "net/updates", "net/vanishing")
    static = {"main": {s: fmt.UPDATES for s in scopes}}
    static["main"].update({"net/blocked": fmt.BLOCKED, "net/ignored": fmt.IGNORED})
    main = {
        "net": grad_row(1.0, grad_vars=8, nonfinite=3.0),
        "net/blocked": NO_GRADIENT_ROW,
        "net/ignored": grad_row(0.2),
        "net/nonfinite": grad_row(float("nan"), nonfinite=3.0),
        "net/updates": grad_row(0.5),
        "net/vanishing": grad_row(0.0),
    }
    violation = fmt.Event(
        type=fmt.VIOLATION,
        name="blocked(main, net/updates)",
        step=10,
        message="loss 'main' reaches scope 'net/updates'",
        loss="main",
        scope="net/updates",
    )
    return RunSpec(
        name="states",
        scopes=scopes,
        static=static,
        grads={"main": main, "probe": {s: NO_GRADIENT_ROW for s in scopes}},
        updates={s: (0.0 if s == "net/ignored" else 0.01, 2.0) for s in scopes},
        events=(violation,),
        start_points=("main",),
    )


def unrecorded_spec() -> RunSpec:
    """A run recorded without max_abs and zero_frac (`Recorder(grad_columns=...)`
    leaves them out, so they read NaN) on `net/dense`; `net/kept` recorded them.
    `net/late`'s update was not measured (NaN ‖Δθ‖ beside a finite ‖θ‖: a TF1
    train op that ran after the step was written); `net/diverged`'s weights went
    NaN (both norms NaN, measured)."""
    scopes = ("net", "net/dense", "net/diverged", "net/kept", "net/late")
    nan = float("nan")
    grads = {
        "net": (3.0, 0.875, nan, 0.0, nan),
        "net/dense": (2.0, 0.75, nan, 0.0, nan),
        "net/diverged": grad_row(0.25, 1),
        "net/kept": grad_row(0.375, 1),
        "net/late": grad_row(0.125, 1),
    }
    updates = {s: (0.01, 2.0) for s in scopes}
    updates["net/late"] = (nan, 2.0)
    updates["net/diverged"] = (nan, nan)
    return RunSpec(
        name="unrecorded",
        scopes=scopes,
        static={"fit": {s: fmt.UPDATES for s in scopes}},
        grads={"fit": grads},
        updates=updates,
    )


# The rules the eager run was trained with: `check` can only check them on its
# gradient tables, and the tracks rule names a pair the run never declared.
EAGER_RULES = ("never(td, target/*)", "tracks(target, online)")


def eager_spec() -> RunSpec:
    """An eager loop's run: tables but no FlowGraph, so a scope the loss sends no
    gradient to can only be "no_gradient" (blocked or independent, nobody knows);
    its rules can be checked on its tables only, and its tracks rule has no pair."""
    scopes = ("online", "online/l1", "target", "target/l1")
    return RunSpec(
        name="eager",
        scopes=scopes,
        static={},
        grads={
            "td": {s: grad_row(0.5) if s.startswith("online") else NO_GRADIENT_ROW for s in scopes}
        },
        updates={s: (0.01 if s.startswith("online") else 0.0, 2.0) for s in scopes},
        flowgraph=False,
        rules=EAGER_RULES,
    )


def many_drift_spec(blocks: int = 15) -> RunSpec:
    """A ResNet-like pair: the root `target`, per block a roll-up, a conv and a
    BatchNorm scope (later blocks drift more), and two BatchNorm moving
    statistics per block, declared as state rows: 76 rows in all."""
    state = tuple(
        f"target/block{i:02d}/bn/moving_{s}" for i in range(blocks) for s in ("mean", "variance")
    )
    scopes = ["target"]
    for i in range(blocks):
        scopes += [f"target/block{i:02d}", f"target/block{i:02d}/bn", f"target/block{i:02d}/conv"]
        scopes += [s for s in state if s.startswith(f"target/block{i:02d}/")]
    steps = (0, 5, 10)

    def row(scope: str, step: int) -> tuple[float, ...]:
        block = int(scope.split("/")[1][5:]) if "/" in scope else blocks
        weight = (
            2.0 if scope in state else {"conv": 1.5, "bn": 1.0}.get(scope.rpartition("/")[2], 1.25)
        )
        online = 4.0 + block
        distance = 0.01 * (block + 1) * weight * (1 + step)
        return (distance / online, distance, online, 0.0, 0.01)

    pair = DriftSpec(
        name="target<-online",
        attrs={"target": "target", "online": "online", "state_scopes": list(state), "tau": 0.01},
        scopes=tuple(scopes),
        rows={step: tuple(row(scope, step) for scope in scopes) for step in steps},
    )
    return RunSpec(
        name="drift_many",
        scopes=("online", "online/l1"),
        static={"td": {"online": fmt.UPDATES, "online/l1": fmt.UPDATES}},
        grads={"td": {"online": grad_row(0.5), "online/l1": grad_row(0.5)}},
        updates={"online": (0.01, 2.0), "online/l1": (0.01, 2.0)},
        steps=steps,
        drift=(pair,),
    )


def wide_spec(top: int = 20, middle: int = 25, leaves: int = 20) -> RunSpec:
    """A 10,000-scope model: `top` x `middle` x `leaves` scopes, three levels deep."""
    scopes: list[str] = []
    for i in range(top):
        scopes.append(f"block{i:02d}")
        for j in range(middle):
            scopes.append(f"block{i:02d}/layer{j:02d}")
            scopes.extend(f"block{i:02d}/layer{j:02d}/unit{k:02d}" for k in range(leaves))
    losses = ("policy", "value")
    return RunSpec(
        name="wide",
        scopes=tuple(scopes),
        static={loss: {s: fmt.UPDATES for s in scopes} for loss in losses},
        grads={loss: {s: grad_row(0.1 + n % 7) for n, s in enumerate(scopes)} for loss in losses},
        updates={s: (0.01, 2.0) for s in scopes},
    )


# What compact numbers (two significant digits) must show for values at the
# edges of their notation: integer zeros kept, exponents where plain notation
# would need more than four characters of zeros.
COMPACT_SHOWN = {
    10.0: "10",
    20.0: "20",
    30.16: "30",
    39.74: "40",
    90.0: "90",
    99.96: "100",
    100.0: "100",
    398.0: "400",
    999.6: "1.0e+3",
    1234.0: "1.2e+3",
    5e6: "5.0e+6",
    1e20: "1.0e+20",
    0.01: "0.01",
    0.00999: "0.01",
    0.012: "0.012",
    0.0049: "4.9e-3",
    1e-5: "1.0e-5",
    2.5e-10: "2.5e-10",
    1.5: "1.5",
    2.0: "2",
    0.25: "0.25",
}


def numbers_spec() -> RunSpec:
    """One loss whose cells' ‖g‖ (and the scopes' ‖Δθ‖) are the values of COMPACT_SHOWN."""
    scopes = ("n",) + tuple(f"n/v{i:02d}" for i in range(len(COMPACT_SHOWN)))
    values = dict(zip(scopes[1:], COMPACT_SHOWN))
    grads = {s: grad_row(values.get(s, 1.0)) for s in scopes}
    return RunSpec(
        name="numbers",
        scopes=scopes,
        static={"fit": {s: fmt.UPDATES for s in scopes}},
        grads={"fit": grads},
        updates={s: (values.get(s, 1.0), 4.0) for s in scopes},
    )


def graph_spec(blocks: int = 10, layers: int = 50) -> RunSpec:
    """A 500-scope scope graph: `blocks` chains of `layers` leaf scopes each,
    fed by one input and all flowing into one loss."""
    leaves = [f"block{i:02d}/layer{j:02d}" for i in range(blocks) for j in range(layers)]
    scopes = tuple(
        s
        for i in range(blocks)
        for s in [f"block{i:02d}"] + [leaf for leaf in leaves if leaf.startswith(f"block{i:02d}/")]
    )
    nodes = [fmt.GraphNode(id=s, kind="scope", label=s) for s in leaves]
    nodes += [
        fmt.GraphNode(id="input:x", kind="input", label="x"),
        fmt.GraphNode(id="loss:fit", kind="loss", label="fit"),
    ]
    edges = []
    for i in range(blocks):
        chain = [f"block{i:02d}/layer{j:02d}" for j in range(layers)]
        edges.append(fmt.GraphEdge(src="input:x", dst=chain[0], tensors=1))
        edges += [fmt.GraphEdge(src=a, dst=b, tensors=1) for a, b in zip(chain, chain[1:])]
        edges.append(fmt.GraphEdge(src=chain[-1], dst="loss:fit", tensors=1))
    return RunSpec(
        name="graph500",
        scopes=scopes,
        static={"fit": {s: fmt.UPDATES for s in scopes}},
        grads={"fit": {s: grad_row(0.5) for s in scopes}},
        updates={s: (0.01, 2.0) for s in scopes},
        nodes=tuple(nodes),
        edges=tuple(edges),
    )


def write_run(logdir: pathlib.Path, spec: RunSpec) -> None:
    """Writes `spec` as event files under logdir/name."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(logdir / spec.name))
    with writer.as_default():
        for step in spec.steps:
            if step == spec.steps[0] and spec.flowgraph:
                _write_flowgraph(spec, step)
            for loss, rows in spec.grads.items():
                info = fmt.make_info(fmt.Kind.GRAD_STATS, loss, spec.scopes, spec.rule_attrs)
                _write_table(info, [rows[s] for s in spec.scopes], step)
            info = fmt.make_info(fmt.Kind.UPDATE_STATS, "", spec.scopes)
            _write_table(info, [spec.updates[s] for s in spec.scopes], step)
            for pair in spec.drift:
                _write_table(
                    fmt.make_info(fmt.Kind.DRIFT, pair.name, pair.scopes, pair.attrs),
                    list(pair.rows[step]),
                    step,
                )
            if spec.events and step == spec.steps[-1]:
                _write_blobs(
                    fmt.make_info(fmt.Kind.EVENTS), [e.to_json() for e in spec.events], step
                )
    writer.flush()
    writer.close()


def _write_table(info: fmt.RecordInfo, rows: list[tuple[float, ...]], step: int) -> None:
    import tensorflow as tf

    tf.summary.write(
        fmt.tag_for(info.kind, info.name),
        tf.constant(fmt.encode_table(info, rows)),
        step=step,
        metadata=fmt.create_summary_metadata(info),
    )


def _write_blobs(info: fmt.RecordInfo, documents: list[object], step: int) -> None:
    import tensorflow as tf

    tf.summary.write(
        fmt.tag_for(info.kind, info.name),
        tf.constant(fmt.encode_blobs(info, documents)),
        step=step,
        metadata=fmt.create_summary_metadata(info),
    )


def _write_flowgraph(spec: RunSpec, step: int) -> None:
    graph = fmt.FlowGraph(
        losses=[
            fmt.LossInfo(name=loss, kind="start_point" if loss in spec.start_points else "loss")
            for loss in spec.static
        ],
        scopes=list(spec.scopes),
        cells={loss: dict(row) for loss, row in spec.static.items()},
        applied=[s for s in spec.scopes if any(r[s] == fmt.UPDATES for r in spec.static.values())],
        nodes=list(spec.nodes),
        edges=list(spec.edges),
        blocked_edges=list(spec.blocked),
        source="tf2",
    )
    _write_blobs(fmt.make_info(fmt.Kind.FLOWGRAPH, attrs=spec.rule_attrs), [graph.to_json()], step)


DQN_LOSSES = ("aux", "td")
DQN_SCOPES = ("online", "online/l1", "online/l2", "target", "target/l1", "target/l2")


class DqnTrainer:
    """A tiny DQN recorded by the real Recorder: online and target nets.

    The TD target goes through `tf.stop_gradient` on the target net, so `td`
    updates online/* and is blocked on target/*; `aux` (an activity penalty on
    online/l1) does not depend on online/l2 or the target at all.
    """

    def __init__(self, run_dir: pathlib.Path, every_n_steps: int = 10, seed: int = 0):
        import keras
        import numpy as np
        import tensorflow as tf

        from tb_gradscope.record import Recorder

        keras.utils.set_random_seed(seed)
        self._rng = np.random.default_rng(seed)
        online, target = self._net(keras), self._net(keras)
        target.set_weights(online.get_weights())
        optimizer = keras.optimizers.Adam(1e-2)
        self.recorder = Recorder(
            logdir=str(run_dir),
            every_n_steps=every_n_steps,
            models={"online": online, "target": target},
        )
        rec = self.recorder
        variables = online.trainable_variables + target.trainable_variables

        @tf.function
        def train_step(s, a, r, s2):
            with rec.tape() as tape:
                q = tf.reduce_sum(online(s) * tf.one_hot(a, 2), axis=1)
                y = r + 0.9 * tf.stop_gradient(tf.reduce_max(target(s2), axis=1))
                td = tf.reduce_mean(tf.square(y - q))
                aux = 1e-3 * tf.reduce_mean(tf.square(online.get_layer("l1")(s)))
            grads_and_vars = rec.gradients(tape, {"td": td, "aux": aux}, variables)
            rec.apply(optimizer, [(g, v) for g, v in grads_and_vars if g is not None])

        self._train_step = train_step

    @staticmethod
    def _net(keras):
        return keras.Sequential(
            [
                keras.Input((4,)),
                keras.layers.Dense(8, activation="relu", name="l1"),
                keras.layers.Dense(2, name="l2"),
            ]
        )

    def train(self, steps: int) -> None:
        """Runs `steps` training steps on random transitions, then flushes."""
        for _ in range(steps):
            s, s2 = self._rng.normal(size=(2, 16, 4)).astype("float32")
            a = self._rng.integers(0, 2, 16).astype("int32")
            r = self._rng.normal(size=16).astype("float32")
            self._train_step(s, a, r, s2)
        self.recorder.flush()


DEMO_TWINS = (("multihead", "clean"), ("multihead", "leaky"), ("ema_lstm", "leaky"))
DEMO_STEPS = 16


def record_demo_runs(logdir: pathlib.Path) -> list[str]:
    """Trains the demo twins of DEMO_TWINS under the real Recorder into
    logdir/<demo>/<twin>; returns their run names.

    The plugin's events route serves recorded events only, and the recorder
    writes no anomalies, so ema_lstm/leaky also gets an EVENTS record with the
    anomalies that `tb_gradscope.read.anomalies` derives from its recorded drift
    (what `tb-gradscope report` lists for the run).
    """
    from tb_gradscope.demos import spec as demo_spec
    from tb_gradscope.read.logdir import load_logdir
    from tb_gradscope.read.summary import run_anomalies

    runs = []
    for demo, twin in DEMO_TWINS:
        run_dir = logdir / demo / twin
        demo_spec.load_demo(demo).train(
            demo_spec.RunSpec(twin=twin, run_dir=str(run_dir), steps=DEMO_STEPS)
        )
        runs.append(f"{demo}/{twin}")
    (logs,) = load_logdir(str(logdir / "ema_lstm"), run="leaky")
    write_events(logdir / "ema_lstm" / "leaky", run_anomalies(logs)[0])
    return runs


def write_events(run_dir: pathlib.Path, events: list[fmt.Event]) -> None:
    """Writes `events` as EVENTS records (one per step) in a new event file."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(run_dir), filename_suffix=".anomalies")
    with writer.as_default():
        for step in sorted({e.step for e in events}):
            _write_blobs(
                fmt.make_info(fmt.Kind.EVENTS),
                [e.to_json() for e in events if e.step == step],
                step,
            )
    writer.flush()
    writer.close()
