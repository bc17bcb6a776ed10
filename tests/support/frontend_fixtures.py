"""Session fixtures for the Gradscope tab's tests: logs, a TensorBoard process, a browser.

The logs come from tests/support/frontend_logs.py: DQN runs recorded by the real
Recorder, plus hand-written runs. Test modules load this file as a plugin
(`pytest_plugins = ["tests.support.frontend_fixtures"]`), so each session fixture exists
once however many modules use it; tests/conftest.py may take them over.
"""

from __future__ import annotations

import dataclasses
import pathlib
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser

from tests.support.frontend_logs import (
    HOSTILE,
    LONG_RUN,
    DqnTrainer,
    eager_spec,
    graph_spec,
    hostile_spec,
    long_names_spec,
    many_drift_spec,
    numbers_spec,
    record_demo_runs,
    states_spec,
    unrecorded_spec,
    wide_spec,
    write_run,
)

REPO = pathlib.Path(__file__).resolve().parents[2]
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
_TB_URL = re.compile(r"TensorBoard \S+ at (http://127\.0\.0\.1:\d+)/")


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

    def wait_until_loaded(self, runs: list[str], timeout: float = 120.0) -> None:
        """Waits until no run of `runs` gains kept steps for two seconds."""
        deadline = time.monotonic() + timeout
        before: list[int] = []
        while time.monotonic() < deadline:
            counts = [len(self.json("run", run=run)["steps"]) for run in runs]
            if counts == before and all(counts):
                return
            before = counts
            time.sleep(2.0)
        raise AssertionError(f"runs {runs} kept loading for {timeout} s (step counts {before})")


def launch_tensorboard(
    logdir: pathlib.Path,
    log: pathlib.Path,
    executable: pathlib.Path | None = None,
    module: bool = False,
    reload_interval: float | None = 1,
) -> subprocess.Popen:
    """Starts `tensorboard --port 0` writing its stderr to `log`; returns at once.

    `executable` defaults to the dev venv's `tensorboard` script; with
    `module=True` it is a Python interpreter that runs `-m tensorboard.main`.
    It runs in the log's folder: from the repository, `-m` would import the
    source tree's tb_gradscope instead of the installed one.
    `reload_interval=None` keeps TensorBoard's default (5 s).
    """
    program = [str(executable or VENV_BIN / "tensorboard")]
    if module:
        program += ["-m", "tensorboard.main"]
    command = program + ["--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0"]
    if reload_interval is not None:
        command += ["--reload_interval", str(reload_interval)]
    with log.open("w") as stderr:
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, cwd=log.parent)


def await_tensorboard(
    process: subprocess.Popen, logdir: pathlib.Path, log: pathlib.Path
) -> TensorBoard:
    """Waits for the URL a launched TensorBoard prints on stderr."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        match = _TB_URL.search(log.read_text(errors="replace"))
        if match:
            return TensorBoard(url=match.group(1), logdir=logdir, process=process)
        if process.poll() is not None:
            break
        time.sleep(0.2)
    process.kill()
    process.wait()
    raise AssertionError(
        f"tensorboard did not start; its stderr:\n{log.read_text(errors='replace')}"
    )


def start_tensorboard(
    logdir: pathlib.Path,
    log: pathlib.Path,
    executable: pathlib.Path | None = None,
    module: bool = False,
    reload_interval: float | None = 1,
) -> TensorBoard:
    """`launch_tensorboard`, then `await_tensorboard`."""
    return await_tensorboard(
        launch_tensorboard(logdir, log, executable, module, reload_interval), logdir, log
    )


def stop_tensorboard(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclasses.dataclass
class Logs:
    """The session's logdir and the trainer still writing its "live" run."""

    logdir: pathlib.Path
    live: DqnTrainer


@dataclasses.dataclass
class Launch:
    """A TensorBoard process started but perhaps not yet serving."""

    process: subprocess.Popen
    logdir: pathlib.Path
    log: pathlib.Path


@pytest.fixture(scope="session")
def tensorboard_launch(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Launch]:
    """Starts the session's TensorBoard on a still-empty logdir.

    It starts slowly (it imports TensorFlow), so `gradscope_logs` writes the
    logs meanwhile; --reload_interval 1 picks them up as they appear.
    """
    logdir = tmp_path_factory.mktemp("gradscope_logs")
    log = tmp_path_factory.mktemp("tb") / "stderr.txt"
    process = launch_tensorboard(logdir, log)
    try:
        yield Launch(process=process, logdir=logdir, log=log)
    finally:
        stop_tensorboard(process)


@pytest.fixture(scope="session")
def gradscope_logs(tensorboard_launch: Launch) -> Iterator[Logs]:
    """A DQN run (steps 0-30), a "live" DQN run (steps 0-10 so far), runs with
    hostile names, with every flow state, with 10,000 scopes, with numbers at
    the edges of their notation, with long and bidi names, without a FlowGraph,
    with a ResNet-sized drift pair, without max_abs and zero_frac, and a run
    without gradscope data."""
    import tensorflow as tf

    logdir = tensorboard_launch.logdir
    dqn = DqnTrainer(logdir / "dqn")
    dqn.train(31)
    dqn.recorder.close()
    live = DqnTrainer(logdir / "live", seed=1)
    live.train(11)
    write_run(logdir, hostile_spec())
    write_run(logdir, states_spec())
    write_run(logdir, wide_spec())
    write_run(logdir, graph_spec())
    write_run(logdir, numbers_spec())
    write_run(logdir, long_names_spec())
    write_run(logdir, eager_spec())
    write_run(logdir, many_drift_spec())
    write_run(logdir, unrecorded_spec())
    writer = tf.summary.create_file_writer(str(logdir / "scalars_only"))
    with writer.as_default():
        tf.summary.scalar("loss", 1.0, step=0)
    writer.close()
    yield Logs(logdir=logdir, live=live)
    live.recorder.close()


@pytest.fixture(scope="session")
def tensorboard(tensorboard_launch: Launch, gradscope_logs: Logs) -> TensorBoard:
    """The session's TensorBoard, serving every run of `gradscope_logs`."""
    launch = tensorboard_launch
    tb = await_tensorboard(launch.process, launch.logdir, launch.log)
    tb.wait_for_runs(
        [
            "dqn",
            "live",
            HOSTILE,
            "states",
            "wide",
            "graph500",
            "numbers",
            LONG_RUN,
            "eager",
            "drift_many",
            "unrecorded",
        ]
    )
    return tb


@pytest.fixture(scope="session")
def demo_runs(tensorboard: TensorBoard) -> TensorBoard:
    """The session's TensorBoard once it also serves demo runs recorded by the
    real Recorder: multihead/clean, multihead/leaky and ema_lstm/leaky (with
    the anomalies tb_gradscope.read.anomalies derives from its drift)."""
    runs = record_demo_runs(tensorboard.logdir)
    tensorboard.wait_for_runs(runs, timeout=120)
    for run in runs:
        tensorboard.wait_for_steps(run, 2, timeout=120)
    return tensorboard


DEMO_LOGS = REPO / "demo_logs"


def demo_log_runs() -> list[str]:
    """The runs of the committed demo_logs/ (every folder holding an event file)."""
    return sorted(
        {path.parent.relative_to(DEMO_LOGS).as_posix() for path in DEMO_LOGS.rglob("*tfevents*")}
    )


@pytest.fixture(scope="session")
def demo_logs_tensorboard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TensorBoard]:
    """A TensorBoard serving the committed demo_logs/ (read only), once every
    run is listed and its kept steps stopped growing (fully loaded)."""
    tb = start_tensorboard(DEMO_LOGS, tmp_path_factory.mktemp("tb_demo_logs") / "stderr.txt")
    try:
        runs = demo_log_runs()
        tb.wait_for_runs(runs, timeout=120)
        tb.wait_until_loaded(runs)
        yield tb
    finally:
        stop_tensorboard(tb.process)


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Debian's chromium, headless, driven by Playwright (never downloaded)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture()
def artifacts() -> pathlib.Path:
    ARTIFACTS.mkdir(exist_ok=True)
    return ARTIFACTS
