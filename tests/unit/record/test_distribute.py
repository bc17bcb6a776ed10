"""tf.distribute and mixed precision: recorded norms are of the gradients the optimizer applies.

Runs train in subprocesses (`tests.support.distribute_runs`: TensorFlow fixes its
devices when it starts) and are read back through TensorBoard's data provider:
- MirroredStrategy on 2 logical CPUs, custom loop and Keras fit: every table
  equals the one-device run on the same global batches (1e-5);
- MultiWorkerMirroredStrategy, 2 worker processes on 127.0.0.1 (TF_CONFIG):
  one set of event files, the chief's, equal to the one-device run;
- mixed_float16 with a LossScaleOptimizer: norms equal the float32 run within
  mixed-precision tolerance; a forced overflow is a SKIPPED event, not a table.
"""

from __future__ import annotations

import io
import json
import os
import pathlib
import socket
import subprocess
import sys

import numpy as np
import pytest

from tb_gradscope import format as fmt
from tb_gradscope.record import _distribute as distribute
from tb_gradscope.record import _loss_scale as loss_scale
from tests.support.distribute_runs import OVERFLOW_STEP, STEPS
from tests.support.record_fixtures import read_records

pytestmark = pytest.mark.slow

ROOT = pathlib.Path(__file__).resolve().parents[3]
TABLES = (fmt.Kind.GRAD_STATS, fmt.Kind.UPDATE_STATS, fmt.Kind.CONFLICT, fmt.Kind.DRIFT)


def start(mode: str, out: pathlib.Path, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.distribute_runs", mode, str(out)],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish(process: subprocess.Popen) -> str:
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0 and "done" in output, output[-3000:]
    return output


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> pathlib.Path:
    """Every run, the processes started together (the workers must overlap)."""
    out = tmp_path_factory.mktemp("distribute")
    ports = [free_port(), free_port()]
    cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
    workers = [
        start(
            "worker",
            out / f"worker{i}",
            {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": i}})},
        )
        for i in range(2)
    ]
    others = [
        start("mirrored", out),
        start("mixed", out),
        start("legacy", out, {"TF_USE_LEGACY_KERAS": "1"}),
    ]
    outputs = [finish(p) for p in workers + others]
    assert all(outputs)
    return out


def only_run(logdir: pathlib.Path) -> dict:
    records = read_records(str(logdir))
    assert len(records) == 1, sorted(records)
    return next(iter(records.values()))


def tables_of(run: dict) -> dict:
    return {key: steps for key, steps in run.items() if key[0] in TABLES}


def assert_same_tables(got: dict, want: dict, rtol: float, atol: float) -> None:
    assert sorted(tables_of(got)) == sorted(tables_of(want))
    for key, steps in tables_of(want).items():
        assert steps and sorted(got[key]) == sorted(steps), key
        for step, table in steps.items():
            np.testing.assert_allclose(
                np.asarray(got[key][step].values),
                np.asarray(table.values),
                rtol=rtol,
                atol=atol,
                err_msg=f"{key} at step {step}",
            )


def flow_cells(run: dict) -> dict:
    """The FlowGraph's static flow state per (loss, scope)."""
    (docs,) = run[(fmt.Kind.FLOWGRAPH, "")].values()
    return docs[0]["cells"]


@pytest.mark.parametrize("loop", ["loop", "fit"])
def test_mirrored_strategy_records_the_global_gradients(runs, loop):
    mirrored, single = only_run(runs / f"{loop}_mirrored"), only_run(runs / f"{loop}_single")
    grads = [key for key in tables_of(single) if key[0] == fmt.Kind.GRAD_STATS]
    assert len(grads) == 2 and all(sorted(single[key]) == list(range(STEPS)) for key in grads)
    assert_same_tables(mirrored, single, rtol=1e-5, atol=1e-6)


def events_of(run: dict) -> list:
    return sorted(
        (name, e.type, e.name, e.loss, e.scope, e.step)
        for (kind, name), steps in run.items()
        if kind == fmt.Kind.EVENTS
        for docs in steps.values()
        for e in map(fmt.Event.from_json, docs)
    )


def test_mirrored_strategy_drift_and_rules_match_one_device(runs):
    mirrored, single = only_run(runs / "target_mirrored"), only_run(runs / "target_single")
    assert (fmt.Kind.DRIFT, "tgt<-net") in single
    assert_same_tables(mirrored, single, rtol=1e-5, atol=1e-6)
    events = events_of(single)
    assert {e[0] for e in events} == {
        "trace",
        "step",
    }  # the broken rule, seen when traced and at steps
    assert events_of(mirrored) == events


@pytest.mark.parametrize("loop", ["loop", "fit"])
def test_mirrored_strategy_step_is_analyzed_like_one_device(runs, loop):
    cells = flow_cells(only_run(runs / f"{loop}_mirrored"))
    assert cells == flow_cells(only_run(runs / f"{loop}_single"))
    assert cells["q"]["net/body"] == fmt.UPDATES and cells["q"]["net/aux"] == fmt.INDEPENDENT


def test_multi_worker_only_the_chief_writes_and_norms_are_global(runs):
    assert not (runs / "worker1").exists() or not any((runs / "worker1").iterdir())
    files = list((runs / "worker0").glob("*tfevents*"))
    assert len(files) == 1
    # The same custom loop on one device, in the mirrored run's process.
    assert_same_tables(
        only_run(runs / "worker0"), only_run(runs / "loop_single"), rtol=1e-5, atol=1e-6
    )


@pytest.mark.parametrize("loop", ["loop", "fit", "legacy"])
def test_mixed_precision_norms_are_unscaled(runs, loop):
    # float32 on one device: the mirrored process's loop and fit, tf_keras's own run.
    exact = f"{loop}_float32" if loop == "legacy" else f"{loop}_single"
    mixed, exact = only_run(runs / f"{loop}_mixed"), only_run(runs / exact)
    assert_same_tables(mixed, exact, rtol=2e-2, atol=1e-4)
    assert not skipped_events(mixed)  # nothing overflowed at the default scale


def skipped_events(run: dict) -> dict:
    return {
        step: [fmt.Event.from_json(doc) for doc in docs]
        for step, docs in run.get((fmt.Kind.EVENTS, loss_scale.SKIPPED_RECORD), {}).items()
    }


def assert_finite_tables(run: dict) -> None:
    for key, steps in tables_of(run).items():
        for step, table in steps.items():
            assert np.all(np.isfinite(np.asarray(table.values))), (key, step)


def test_an_overflow_step_of_a_custom_loop_is_skipped_not_huge_norms(runs):
    run = only_run(runs / "loop_overflow")
    events = skipped_events(run)
    assert sorted(events) == [OVERFLOW_STEP]
    (event,) = events[OVERFLOW_STEP]
    assert event.type == fmt.SKIPPED and event.name == loss_scale.OVERFLOW
    assert event.evidence == {"loss_scale": 32768.0, "skipped_batches": 1}
    assert_finite_tables(run)
    # The recorder's step counts applied steps: the skipped one has no tables.
    for loss in ("q", "aux"):
        assert sorted(run[(fmt.Kind.GRAD_STATS, loss)]) == [
            s for s in range(STEPS) if s != OVERFLOW_STEP
        ]


@pytest.mark.parametrize("mode", ["", "_jit", "_spe2"])
def test_an_overflow_batch_in_fit_is_skipped_not_huge_norms(runs, mode):
    """Also compiled with XLA and with steps_per_execution=2 (the ring is read between executions)."""
    run = only_run(runs / f"fit_overflow{mode}")
    events = skipped_events(run)
    assert sorted(events) == [OVERFLOW_STEP]
    (event,) = events[OVERFLOW_STEP]
    assert event.type == fmt.SKIPPED and event.evidence["skipped_batches"] == 1
    assert_finite_tables(run)
    # A skipped batch leaves optimizer.iterations where it was: the next batch
    # is recorded at the same step, so STEPS batches make STEPS - 1 steps.
    assert sorted(run[(fmt.Kind.GRAD_STATS, "q")]) == list(range(STEPS - 1))


@pytest.mark.parametrize(
    "config, chief",
    [
        ("", True),
        ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 0}}', True),
        ('{"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}', False),
        (
            '{"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}',
            False,
        ),
        (
            '{"cluster": {"chief": ["c:0"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}',
            True,
        ),
        ("not json", True),
    ],
)
def test_chief_from_tf_config(config, chief):
    assert distribute._chief_by_tf_config(config) is chief


def test_report_lists_the_skipped_step(runs):
    from tb_gradscope.commands import build_parser

    args = build_parser().parse_args(["report", str(runs / "loop_overflow")])
    out = io.StringIO()
    assert args.run(args, out, io.StringIO()) == 0
    section = (
        out.getvalue()
        .split("steps skipped by the loss scaler (mixed precision):\n")[1]
        .split("\n\n")[0]
    )
    assert (
        f"step {OVERFLOW_STEP}  {loss_scale.OVERFLOW}" in section and "loss scale 32768" in section
    )


def test_tf_keras_overflow_is_skipped_and_its_step_counted(runs):
    """tf_keras's loss scaler advances optimizer.iterations on a skipped batch."""
    run = only_run(runs / "legacy_overflow")
    assert sorted(skipped_events(run)) == [OVERFLOW_STEP]
    assert_finite_tables(run)
    assert sorted(run[(fmt.Kind.GRAD_STATS, "q")]) == [
        s for s in range(STEPS) if s != OVERFLOW_STEP
    ]
