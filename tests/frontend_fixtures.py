"""Fixtures for the Gradscope tab's tests: logs, a TensorBoard process, a browser.

The DQN runs are recorded by the real `tb_gradscope.record.Recorder` while a
small DQN trains (`DqnTrainer`); tests compare the page with what TensorBoard
serves for them. The run with hostile names is hand-written event files
(`tf.summary.write` + the `tb_gradscope.format` contract), because crafted logs
can hold any text whatever our recorder accepts; its `RunSpec` says what it holds.

Test modules load this as a plugin (`pytest_plugins = ["tests.frontend_fixtures"]`),
so the session fixtures (one TensorBoard process, one browser) exist once per
session however many modules use them; tests/conftest.py may take them over.
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Iterator, Mapping

import pytest

from tb_gradscope import format as fmt

REPO = pathlib.Path(__file__).resolve().parent.parent
ARTIFACTS = REPO / "test-artifacts"
VENV_BIN = pathlib.Path(sys.executable).parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
HOSTILE = "<img src=x onerror=alert(1)>"
_TB_URL = re.compile(r"TensorBoard \S+ at (http://127\.0\.0\.1:\d+)/")

@dataclasses.dataclass(frozen=True)
class RunSpec:
    """A hand-written run, and what it holds.

    Attributes:
      name: the run's directory name (untrusted text on the page).
      scopes: the scope tree in tree order (parents before children).
      static: per loss, the FlowGraph state of every scope.
      steps: the recorded steps.
      leaf_l2: per (loss, leaf scope), the gradient L2 norm at step 0; it
        halves every 10 steps.
    """

    name: str
    scopes: tuple[str, ...]
    static: Mapping[str, Mapping[str, str]]
    steps: tuple[int, ...]
    leaf_l2: Mapping[tuple[str, str], float]

    @property
    def losses(self) -> list[str]:
        return list(self.static)

    def leaves_under(self, scope: str) -> list[str]:
        return [s for s in self.scopes if (s == scope or s.startswith(scope + "/")) and not self.children(s)]

    def children(self, scope: str) -> list[str]:
        return [s for s in self.scopes if s.rpartition("/")[0] == scope]

    def l2(self, loss: str, scope: str, step: int) -> float | None:
        """The L2 norm written for a cell (roll-ups combine their leaves)."""
        parts = [self.leaf_l2.get((loss, leaf)) for leaf in self.leaves_under(scope)]
        parts = [p * 0.5 ** (step / 10) for p in parts if p is not None]
        return math.sqrt(sum(p * p for p in parts)) if parts else None

    def grad_row(self, loss: str, scope: str, step: int) -> list[float]:
        l2 = self.l2(loss, scope, step)
        if l2 is None:
            return [0.0, 0.0, 0.0, 0.0, 0.0]
        grad_vars = 2.0 * len([l for l in self.leaves_under(scope) if (loss, l) in self.leaf_l2])
        return [grad_vars, l2, l2 / 3.0, 0.0, 0.0]

    def update_row(self, scope: str, step: int) -> list[float]:
        """Applied update: online scopes move, the target moves by nothing."""
        moved = any(self.static[loss][scope] == fmt.UPDATES for loss in self.static)
        weight = 2.0 + len(scope) / 10.0
        return [0.01 * weight * 0.5 ** (step / 10) if moved else 0.0, weight]



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
            logdir=str(run_dir), every_n_steps=every_n_steps,
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
        return keras.Sequential([
            keras.Input((4,)),
            keras.layers.Dense(8, activation="relu", name="l1"),
            keras.layers.Dense(2, name="l2"),
        ])

    def train(self, steps: int) -> None:
        """Runs `steps` training steps on random transitions, then flushes."""
        for _ in range(steps):
            s, s2 = self._rng.normal(size=(2, 16, 4)).astype("float32")
            a = self._rng.integers(0, 2, 16).astype("int32")
            r = self._rng.normal(size=16).astype("float32")
            self._train_step(s, a, r, s2)
        self.recorder.flush()


def hostile_spec() -> RunSpec:
    """Run, loss and scope names that are HTML: they must show as text."""
    root = f"net{HOSTILE}"
    scopes = (root, f"{root}/{HOSTILE}")
    return RunSpec(
        name=HOSTILE,
        scopes=scopes,
        static={HOSTILE: {s: fmt.UPDATES for s in scopes}},
        steps=(0,),
        leaf_l2={(HOSTILE, f"{root}/{HOSTILE}"): 0.3},
    )


def write_run(logdir: pathlib.Path, spec: RunSpec) -> None:
    """Writes `spec` as event files under logdir/name."""
    import tensorflow as tf

    writer = tf.summary.create_file_writer(str(logdir / spec.name))
    with writer.as_default():
        for step in spec.steps:
            if step == spec.steps[0]:
                _write_flowgraph(spec, step)
            for loss in spec.losses:
                info = fmt.make_info(fmt.Kind.GRAD_STATS, loss, spec.scopes)
                rows = [spec.grad_row(loss, s, step) for s in spec.scopes]
                _write_table(info, rows, step)
            info = fmt.make_info(fmt.Kind.UPDATE_STATS, "", spec.scopes)
            _write_table(info, [spec.update_row(s, step) for s in spec.scopes], step)
    writer.flush()
    writer.close()


def _write_table(info: fmt.RecordInfo, rows: list[list[float]], step: int) -> None:
    import tensorflow as tf

    tf.summary.write(
        fmt.tag_for(info.kind, info.name),
        tf.constant(fmt.encode_table(info, rows)),
        step=step,
        metadata=fmt.create_summary_metadata(info),
    )


def _write_flowgraph(spec: RunSpec, step: int) -> None:
    import tensorflow as tf

    graph = fmt.FlowGraph(
        losses=[fmt.LossInfo(name=loss) for loss in spec.losses],
        scopes=list(spec.scopes),
        cells={loss: dict(row) for loss, row in spec.static.items()},
        applied=[s for s in spec.scopes if any(r[s] == fmt.UPDATES for r in spec.static.values())],
        source="tf2",
    )
    info = fmt.make_info(fmt.Kind.FLOWGRAPH)
    tf.summary.write(
        fmt.tag_for(fmt.Kind.FLOWGRAPH),
        tf.constant([fmt.encode_json(graph.to_json())]),
        step=step,
        metadata=fmt.create_summary_metadata(info),
    )


@dataclasses.dataclass
class TensorBoard:
    """A running `tensorboard` process and the logdir it serves."""

    url: str
    logdir: pathlib.Path
    process: subprocess.Popen

    def get(self, path: str) -> bytes:
        with urllib.request.urlopen(self.url + path, timeout=10) as response:
            return response.read()

    def json(self, route: str, **params: str) -> Any:
        """A gradscope route's JSON answer."""
        import json
        import urllib.parse

        query = urllib.parse.urlencode(params)
        return json.loads(self.get(f"/data/plugin/gradscope/{route}?{query}"))

    def wait_for_runs(self, runs: list[str], timeout: float = 60.0) -> None:
        """Waits until the plugin lists every run in `runs`."""
        deadline = time.monotonic() + timeout
        seen: list[str] = []
        while time.monotonic() < deadline:
            try:
                seen = [r["run"] for r in self.json("runs")["runs"]]
            except (urllib.error.URLError, ValueError, KeyError):
                seen = []
            if all(r in seen for r in runs):
                return
            time.sleep(0.3)
        raise AssertionError(f"TensorBoard at {self.url} lists runs {seen}, expected {runs}")

    def wait_for_steps(self, run: str, count: int, timeout: float = 60.0) -> None:
        """Waits until the plugin has loaded `count` kept steps of `run`."""
        deadline = time.monotonic() + timeout
        steps: list[int] = []
        while time.monotonic() < deadline:
            try:
                steps = self.json("run", run=run)["steps"]
            except (urllib.error.URLError, ValueError, KeyError):
                steps = []
            if len(steps) >= count:
                return
            time.sleep(0.3)
        raise AssertionError(f"run {run!r} has steps {steps}, expected {count} of them")


def start_tensorboard(
    logdir: pathlib.Path, log: pathlib.Path, executable: pathlib.Path | None = None, module: bool = False
) -> TensorBoard:
    """Starts `tensorboard --port 0` and reads the URL it prints on stderr.

    `executable` defaults to the dev venv's `tensorboard` script; with
    `module=True` it is a Python interpreter that runs `-m tensorboard.main`.
    It runs in the log's folder: from the repository, `-m` would import the
    source tree's tb_gradscope instead of the installed one.
    """
    program = [str(executable or VENV_BIN / "tensorboard")]
    if module:
        program += ["-m", "tensorboard.main"]
    command = program + ["--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0", "--reload_interval", "1"]
    stderr = log.open("w")
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, cwd=log.parent)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        match = _TB_URL.search(log.read_text(errors="replace"))
        if match:
            return TensorBoard(url=match.group(1), logdir=logdir, process=process)
        if process.poll() is not None:
            break
        time.sleep(0.2)
    process.kill()
    raise AssertionError(f"tensorboard did not start; its stderr:\n{log.read_text(errors='replace')}")


def stop_tensorboard(tb: TensorBoard) -> None:
    tb.process.terminate()
    try:
        tb.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        tb.process.kill()
        tb.process.wait()


@dataclasses.dataclass
class Logs:
    """The session's logdir and the trainer still writing its "live" run."""

    logdir: pathlib.Path
    live: DqnTrainer


@pytest.fixture(scope="session")
def gradscope_logs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Logs]:
    """A DQN run (steps 0-30), a "live" DQN run (steps 0-10 so far), a run
    with hostile names and a run without gradscope data."""
    import tensorflow as tf

    logdir = tmp_path_factory.mktemp("gradscope_logs")
    dqn = DqnTrainer(logdir / "dqn")
    dqn.train(31)
    dqn.recorder.close()
    live = DqnTrainer(logdir / "live", seed=1)
    live.train(11)
    write_run(logdir, hostile_spec())
    writer = tf.summary.create_file_writer(str(logdir / "scalars_only"))
    with writer.as_default():
        tf.summary.scalar("loss", 1.0, step=0)
    writer.close()
    yield Logs(logdir=logdir, live=live)
    live.recorder.close()


@pytest.fixture(scope="session")
def tensorboard(gradscope_logs: Logs, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    """One TensorBoard process over `gradscope_logs` for the whole session."""
    tb = start_tensorboard(gradscope_logs.logdir, tmp_path_factory.mktemp("tb") / "stderr.txt")
    try:
        tb.wait_for_runs(["dqn", HOSTILE, "live"])
        yield tb
    finally:
        stop_tensorboard(tb)


@pytest.fixture(scope="session")
def browser() -> Iterator["object"]:
    """Debian's chromium, headless, driven by Playwright (never downloaded)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture()
def artifacts() -> pathlib.Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
