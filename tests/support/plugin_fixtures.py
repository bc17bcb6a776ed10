"""Real gradscope event files for the plugin tests and benchmark.

Writes records exactly as the recorder does (tf.summary.write, the full
metadata on a tag's first write in a writer and b"" afterwards) with values
that are a pure function of (record, scope, step), so tests compare what the
plugin serves with `expected_*` here instead of hard-coded answers.

Also runnable, to keep writing a run from another process while TensorBoard
watches (one open event file, flushed after each batch):
  python -m tests.support.plugin_fixtures LOGDIR RUN --steps 5 --batches 2 --go FILE
"""

from __future__ import annotations

import argparse
import dataclasses
import pathlib
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence

import numpy as np
from tensorboard.plugins.scalar import metadata as scalar_metadata

from tb_gradscope import format as fmt

HOSTILE = '<img src=x onerror=alert(1)>/"q" ..%2f..'
SCOPES = ("online", "online/l1", "online/l2", "target", "target/l1")
NEW_SCOPES = SCOPES + ("online/l3",)  # layout 1: a variable created mid-run
LOSSES = ("td", "aux")
PAIR = "target<-online"
CONFLICT = "td|aux"

# Cells with a deliberate numeric state (loss, scope) -> state, at every step
# that is a multiple of ANOMALY_EVERY.
ANOMALY_EVERY = 5
VANISHING_CELL = ("td", "online/l2")
NONFINITE_CELL = ("aux", "online/l1")


def flowgraph(scopes: Sequence[str] = SCOPES) -> fmt.FlowGraph:
    """td updates online/*, is blocked on target/*; aux (a start point) is
    independent of target and ignored on online/l2."""
    cells = {"td": {}, "aux": {}}
    for s in scopes:
        cells["td"][s] = fmt.UPDATES if s.startswith("online") else fmt.BLOCKED
        if s.startswith("target"):
            cells["aux"][s] = fmt.INDEPENDENT
        elif s == "online/l2":
            cells["aux"][s] = fmt.IGNORED
        else:
            cells["aux"][s] = fmt.UPDATES
    return fmt.FlowGraph(
        losses=[fmt.LossInfo("td"), fmt.LossInfo("aux", "start_point", "q:0")],
        scopes=list(scopes),
        cells=cells,
        blocked_edges=[
            fmt.BlockedEdge(
                loss="td",
                producer="target/l1/MatMul",
                consumer="StopGradient",
                op_name="StopGradient",
                op_type="StopGradient",
                cause=fmt.flowgraph.CAUSE_STOP_GRADIENT,
                producer_scope="target/l1",
                consumer_scope="loss:td",
                source=fmt.SourceLine("train.py", 42, "train_step"),
            )
        ],
        nodes=[fmt.GraphNode(s, fmt.flowgraph.NODE_SCOPE, s) for s in scopes],
        edges=[fmt.GraphEdge("target/l1", "loss:td", 1, ("td",))],
        applied=[s for s in scopes if s.startswith("online")],
        source="tf2",
    )


def grad_table(loss: str, scopes: Sequence[str], step: int) -> np.ndarray:
    """grad_stats rows: target/* get no gradient from either loss; aux's
    gradient for online/l2 (not in its var_list) is computed at even steps only."""
    rows = []
    for i, scope in enumerate(scopes):
        if scope.startswith("target") or (loss == "aux" and scope == "online/l2" and step % 2):
            rows.append([0.0, 0.0, 0.0, 0.0, 0.0])
            continue
        l2 = (i + 1) * (1.0 + step / 1000.0) * (2.0 if loss == "aux" else 1.0)
        row = [2.0, l2, l2 / 2.0, 0.0, 0.25]
        if step % ANOMALY_EVERY == 0 and (loss, scope) == VANISHING_CELL:
            row[1:3] = [0.0, 0.0]
        if step % ANOMALY_EVERY == 0 and (loss, scope) == NONFINITE_CELL:
            row[1], row[3] = float("nan"), 3.0
        rows.append(row)
    return np.asarray(rows, dtype=np.float32)


def update_table(scopes: Sequence[str], step: int) -> np.ndarray:
    """Applied updates: online moves, target does not."""
    rows = []
    for i, scope in enumerate(scopes):
        weight = 10.0 + i
        update = 0.0 if scope.startswith("target") else 0.01 * (i + 1)
        rows.append([update, weight])
    return np.asarray(rows, dtype=np.float32)


def drift_table(scopes: Sequence[str], step: int) -> np.ndarray:
    rows = []
    for i, _ in enumerate(scopes):
        drift = 0.1 * (i + 1) + step * 1e-4
        tau = float("nan") if step == 0 else 0.005
        rows.append([drift, drift * 10.0, 10.0, 0.01, tau])
    return np.asarray(rows, dtype=np.float32)


def conflict_table(scopes: Sequence[str], step: int) -> np.ndarray:
    return np.asarray(
        [[float(np.cos(step / 10.0 + i))] for i in range(len(scopes))], dtype=np.float32
    )


def events_at(step: int) -> list[fmt.Event]:
    """A violation every 7 steps, an anomaly every 11."""
    out = []
    if step % 7 == 3:
        out.append(
            fmt.Event(
                type=fmt.VIOLATION,
                name="never(td, target/*)",
                step=step,
                message=f"td reached target/l1 at step {step}",
                loss="td",
                scope="target/l1",
                evidence={"l2": float("inf"), "op": "MatMul"},
            )
        )
    if step % 11 == 4:
        out.append(
            fmt.Event(
                type=fmt.ANOMALY, name="never_synced", step=step, message="no sync", pair=PAIR
            )
        )
    return out


@dataclasses.dataclass(frozen=True)
class RunSpec:
    """What one fixture run contains."""

    steps: Sequence[int]
    losses: Sequence[str] = LOSSES
    scopes: Sequence[str] = SCOPES
    new_layout_from: int | None = None  # step where NEW_SCOPES (layout ~1) start
    flowgraph: bool = True
    events: bool = True
    scalar_tag: str | None = None


def write_run(logdir: str, run: str, spec: RunSpec, writer=None, first: set | None = None) -> None:
    """Writes one run in one writer (one event file). Pass `writer` and
    `first` (tags already written with metadata) to keep writing the same
    file across calls; the writer is then flushed, not closed."""
    import tensorflow as tf

    own = writer is None
    writer = writer or tf.summary.create_file_writer(f"{logdir}/{run}", max_queue=1000)
    first = set() if first is None else first

    def write(info: fmt.RecordInfo, tag: str, value, step: int) -> None:
        meta = b"" if tag in first else fmt.create_summary_metadata(info).SerializeToString()
        first.add(tag)
        tf.summary.write(tag, value, step=step, metadata=meta)

    with writer.as_default():
        for step in spec.steps:
            layout = 1 if spec.new_layout_from is not None and step >= spec.new_layout_from else 0
            scopes = NEW_SCOPES if layout else tuple(spec.scopes)
            for loss in spec.losses:
                info = fmt.make_info(fmt.Kind.GRAD_STATS, loss, scopes)
                write(
                    info, fmt.tag_for(info.kind, loss, layout), grad_table(loss, scopes, step), step
                )
            for kind, name, table, attrs in (
                (fmt.Kind.UPDATE_STATS, "", update_table, {}),
                (fmt.Kind.DRIFT, PAIR, drift_table, {"target": "target", "online": "online"}),
                (fmt.Kind.CONFLICT, CONFLICT, conflict_table, {"losses": ["td", "aux"]}),
            ):
                info = fmt.make_info(kind, name, scopes, attrs)
                write(info, fmt.tag_for(kind, name, layout), table(scopes, step), step)
            if spec.flowgraph and (step == spec.steps[0] or step == spec.new_layout_from):
                info = fmt.make_info(fmt.Kind.FLOWGRAPH)
                docs = fmt.encode_blobs(info, [flowgraph(scopes).to_json()])
                write(info, fmt.tag_for(fmt.Kind.FLOWGRAPH), tf.constant(docs), step)
            if spec.events and events_at(step):
                info = fmt.make_info(fmt.Kind.EVENTS)
                docs = fmt.encode_blobs(info, [e.to_json() for e in events_at(step)])
                write(info, fmt.tag_for(fmt.Kind.EVENTS), tf.constant(docs), step)
            if spec.scalar_tag:
                tf.summary.scalar(spec.scalar_tag, float(step % 17), step=step)
    if own:
        writer.close()
        _name_in_write_order(pathlib.Path(logdir, run))
    else:
        writer.flush()


# TensorFlow names an event file `...tfevents.<seconds>.<host>.<pid>.<n>.v2`, n
# a per-process count of writers. TensorBoard reads a run's files in name order
# and skips a file that sorts before one it has read, so a second file written
# in the same second as n passes 99 -> 100 would be lost (a flaky test, not a
# bug of the reader). Zero-padding n keeps the fixture's files in write order.
_EVENT_FILE = re.compile(r"(events\.out\.tfevents\..+\.)(\d+)(\.v2)")


def _name_in_write_order(run_dir: pathlib.Path) -> None:
    for path in run_dir.iterdir():
        match = _EVENT_FILE.fullmatch(path.name)
        if match:
            head, count, tail = match.groups()
            path.rename(run_dir / f"{head}{int(count):08d}{tail}")


def write_bulk(
    logdir: str,
    run: str,
    steps: int,
    scopes: Sequence[str],
    losses: Sequence[str],
    scalar_tag: str | None = None,
    chunk: int = 5000,
    tables: bool = True,
) -> None:
    """A long run fast: grad_stats per loss and update_stats at steps
    0..steps-1 with pseudo-random values, written by a compiled loop (the
    metadata on each tag's first write only, as the recorder does). With
    tables=False only the scalar tag is written (into its own event file)."""
    import tensorflow as tf

    infos = [fmt.make_info(fmt.Kind.GRAD_STATS, loss, scopes) for loss in losses] if tables else []
    if tables:
        infos.append(fmt.make_info(fmt.Kind.UPDATE_STATS, "", scopes))
    tags = [fmt.tag_for(i.kind, i.name) for i in infos]
    writer = tf.summary.create_file_writer(
        f"{logdir}/{run}", max_queue=100_000, flush_millis=600_000
    )
    scalar_meta = scalar_metadata.create_summary_metadata("", "").SerializeToString()

    def table(step, k: int, columns: int):
        seed = tf.stack([tf.cast(step, tf.int64), tf.constant(k, tf.int64)])
        return tf.random.stateless_uniform([len(scopes), columns], seed=seed) + 0.5

    @tf.function
    def write_steps(start, count):
        for i in tf.range(count):
            step = start + tf.cast(i, tf.int64)
            for k, (tag, info) in enumerate(zip(tags, infos)):
                tf.summary.write(tag, table(step, k, len(info.columns)), step=step, metadata=b"")
            if scalar_tag:  # a loss-like float32 value (write: no "while/" name scope)
                value = 1.0 + 0.37 * tf.sin(tf.cast(step, tf.float32))
                tf.summary.write(scalar_tag, value, step=step, metadata=scalar_meta)

    with writer.as_default():
        for k, (tag, info) in enumerate(zip(tags, infos)):
            meta = fmt.create_summary_metadata(info).SerializeToString()
            tf.summary.write(tag, table(0, k, len(info.columns)), step=0, metadata=meta)
        if scalar_tag:
            tf.summary.write(scalar_tag, 1.0, step=0, metadata=scalar_meta)
        for start in range(1, steps, chunk):
            write_steps(tf.constant(start, tf.int64), tf.constant(min(chunk, steps - start)))
    writer.close()


def write_plain_run(logdir: str, run: str, steps: Iterable[int]) -> None:
    """A run with scalars only: no gradscope data."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(f"{logdir}/{run}")
    with writer.as_default():
        for step in steps:
            tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
    writer.close()


def write_unreadable_run(logdir: str, run: str) -> None:
    """One good grad_stats record, one from a newer format version, one with
    metadata that is not JSON, one whose stored table has the wrong shape, and
    events that are not Event documents (step 0) or not JSON (step 1)."""
    import tensorflow as tf
    from tensorboard.compat.proto import summary_pb2

    good = fmt.make_info(fmt.Kind.GRAD_STATS, "td", SCOPES)
    newer = dataclasses.replace(
        fmt.make_info(fmt.Kind.GRAD_STATS, "future", SCOPES), version=fmt.FORMAT_VERSION + 1
    )
    garbage = summary_pb2.SummaryMetadata(
        plugin_data=summary_pb2.SummaryMetadata.PluginData(
            plugin_name=fmt.PLUGIN_NAME, content=b"\xffnot json"
        ),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )
    wrong = fmt.make_info(fmt.Kind.GRAD_STATS, "wrong_shape", SCOPES)
    events = fmt.make_info(fmt.Kind.EVENTS)
    bad_events = [fmt.encode_json({"type": "violation", "step": 0}), b"{not json"]
    writer = tf.summary.create_file_writer(f"{logdir}/{run}")
    with writer.as_default():
        for step in (0, 1):

            def meta(m):
                return m if step == 0 else b""

            tf.summary.write(
                fmt.tag_for(fmt.Kind.GRAD_STATS, "td"),
                grad_table("td", SCOPES, step),
                step=step,
                metadata=meta(fmt.create_summary_metadata(good).SerializeToString()),
            )
            tf.summary.write(
                fmt.tag_for(fmt.Kind.GRAD_STATS, "future"),
                grad_table("td", SCOPES, step),
                step=step,
                metadata=meta(fmt.create_summary_metadata(newer).SerializeToString()),
            )
            tf.summary.write(
                "gradscope/garbage",
                np.zeros((1, 1), np.float32),
                step=step,
                metadata=meta(garbage.SerializeToString()),
            )
            tf.summary.write(
                fmt.tag_for(fmt.Kind.GRAD_STATS, "wrong_shape"),
                np.zeros((2, 2), np.float32),
                step=step,
                metadata=meta(fmt.create_summary_metadata(wrong).SerializeToString()),
            )
            tf.summary.write(
                fmt.tag_for(fmt.Kind.EVENTS),
                tf.constant([bad_events[step]]),
                step=step,
                metadata=meta(fmt.create_summary_metadata(events).SerializeToString()),
            )
    writer.close()


MAIN_RUN = "dqn"
MAIN_STEPS = range(0, 60)
LAYOUT_CHANGE = 40
HOSTILE_RUN = 'hostile <b>"run"</b>'
HOSTILE_SCOPES = ("online", f"online/{HOSTILE}", "target", "target/l1")


def write_standard_logdir(root: str) -> str:
    """The logdir most plugin tests read: a DQN-like run with a mid-run
    layout change, a run with hostile names, one without gradscope data and
    one with unreadable records."""
    write_run(
        root,
        MAIN_RUN,
        RunSpec(steps=MAIN_STEPS, new_layout_from=LAYOUT_CHANGE, scalar_tag="loss/td"),
    )
    write_run(root, HOSTILE_RUN, RunSpec(steps=range(0, 4), scopes=HOSTILE_SCOPES, flowgraph=False))
    write_plain_run(root, "plain", range(5))
    write_unreadable_run(root, "broken")
    return root


class TensorBoardServer:
    """A real `tensorboard` process on 127.0.0.1 and a free port.

    The URL is parsed from the "TensorBoard ... at http://127.0.0.1:PORT/" line
    TensorBoard prints on stderr; `stop()` ends the process (and, through its
    stdin, the Rust data server it spawned).
    """

    URL_LINE = re.compile(r"TensorBoard \S+ at (http://127\.0\.0\.1:\d+/)")

    def __init__(self, logdir: str, load_fast: str, *extra: str):
        self.logdir, self.load_fast = logdir, load_fast
        binary = pathlib.Path(sys.executable).with_name("tensorboard")
        self.argv = [
            str(binary),
            "--logdir",
            logdir,
            "--port",
            "0",
            "--host",
            "127.0.0.1",
            f"--load_fast={load_fast}",
            "--reload_interval",
            "1",
            *extra,
        ]
        self.lines: list[str] = []
        self.url = ""
        self.process: subprocess.Popen | None = None

    def start(self, timeout: float = 120.0) -> TensorBoardServer:
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        found = threading.Event()

        def pump() -> None:
            for line in self.process.stderr:
                self.lines.append(line)
                match = self.URL_LINE.search(line)
                if match and not self.url:
                    self.url = match.group(1)
                    found.set()

        threading.Thread(target=pump, daemon=True).start()
        if not found.wait(timeout):
            self.stop()
            raise RuntimeError(
                f"tensorboard printed no URL in {timeout}s: {''.join(self.lines)[-2000:]}"
            )
        return self

    def get(self, path: str, timeout: float = 60.0) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body) of a GET on `path` (relative to the root)."""
        request = urllib.request.Request(self.url + path.lstrip("/"))
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return response.status, dict(response.headers), response.read()
        except urllib.error.HTTPError as e:
            return e.code, dict(e.headers), e.read()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=20)


def main() -> None:
    parser = argparse.ArgumentParser(description="keep writing one gradscope run")
    parser.add_argument("logdir")
    parser.add_argument("run")
    parser.add_argument("--steps", type=int, default=5, help="steps per batch")
    parser.add_argument("--batches", type=int, default=2)
    parser.add_argument("--go", help="before each later batch, wait until this file exists")
    args = parser.parse_args()
    import tensorflow as tf

    writer = tf.summary.create_file_writer(f"{args.logdir}/{args.run}")
    first: set[str] = set()
    for b in range(args.batches):
        if b and args.go:
            deadline = time.monotonic() + 120
            while not pathlib.Path(args.go).exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        steps = range(b * args.steps, (b + 1) * args.steps)
        write_run(args.logdir, args.run, RunSpec(steps=steps, events=False), writer, first)
        print(f"flushed steps {steps[0]}..{steps[-1]}", flush=True)
    writer.close()


if __name__ == "__main__":
    main()
