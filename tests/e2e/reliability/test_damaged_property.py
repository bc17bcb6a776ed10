"""Property (issue 24): whatever one damaged record a run holds, the routes
answer 2xx/4xx, never 5xx; `report` and `check` exit 0, 1 or 2 without a
traceback (and without needing the CLI's last-resort handler); every
undamaged record is still served with its values.

Hypothesis writes random well-formed runs (losses, 0 to 6 scopes, steps, events
per step, drift and conflict pairs; tests/support/damaged_logs.py, no tensorflow) and
damages one record at random: its type, its shape, its attrs, its JSON, or
the file's bytes (truncation, a flipped byte, garbage, a header claiming
2^40 bytes). Derandomized, so a failure reproduces.

Cost is kept down by writing event files in pure Python and serving each
example through the Python data provider in-process; the Rust data server
(seconds to start) serves batches of examples, one server per batch.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tensorboard import context as tb_context
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope import cli
from tb_gradscope import format as fmt
from tb_gradscope.plugin.plugin import GradscopePlugin
from tests.support import damaged_logs as dl
from tests.support import providers

PREFIX = "/data/plugin/gradscope/"
SAMPLES = {"gradscope": 10_000}
RUN = "run"
EXAMPLES = int(os.environ.get("GRADSCOPE_DAMAGE_EXAMPLES", "440"))
RUST_BATCHES, RUST_BATCH = 2, 40  # 80 more examples through the Rust data server
SCOPE_TREE = ("online", "online/l1", "online/l2", "target", "target/l1", 'q"<b>/x')
BYTE_HOW = ("truncate", "flip", "garbage", "huge_length")
COUNTS: dict[str, int] = {}


@st.composite
def damaged_runs(draw) -> dl.Damage:
    losses = draw(
        st.lists(st.sampled_from(["td", "aux", "pi", "v"]), min_size=1, max_size=3, unique=True)
    )
    scopes = draw(
        st.lists(st.sampled_from(SCOPE_TREE), min_size=0, max_size=len(SCOPE_TREE), unique=True)
    )
    steps = sorted(draw(st.sets(st.integers(0, 40), min_size=1, max_size=5)))
    plan = dl.RunPlan(
        losses=losses,
        scopes=scopes,
        steps=steps,
        events_per_step=draw(st.integers(0, 2)),
        drift=draw(st.booleans()),
        conflict=draw(st.booleans()),
    )
    records = plan.records()
    how = draw(st.sampled_from(["record", "record", "attrs", "bytes"]))
    if how == "attrs":
        firsts = [i for i, r in enumerate(records) if r.first and r.info.kind in dl.ATTR_DAMAGES]
        if firsts:
            index = draw(st.sampled_from(firsts))
            name = draw(st.sampled_from(sorted(dl.ATTR_DAMAGES[records[index].info.kind])))
            return dl.damage_record(records, index, f"attrs.{name}")
        how = "record"
    kinds = sorted({r.info.kind.value for r in records})
    kind = draw(st.sampled_from(kinds))  # a kind first: every kind gets its share
    index = draw(st.sampled_from([i for i, r in enumerate(records) if r.info.kind.value == kind]))
    if how == "bytes":
        byte_how = draw(st.sampled_from(BYTE_HOW))
        if byte_how == "garbage":
            damage = dl.damage_bytes(records, index, "truncate")  # only for the kept set
            data, frames = dl.encode(records)
            offset, length = frames[index]
            start = offset + draw(st.integers(0, length - 1))
            junk = draw(st.binary(min_size=1, max_size=32))
            damage.data = data[:start] + junk + data[start + len(junk) :]
            damage.name = "bytes:garbage"
            return damage
        return dl.damage_bytes(records, index, byte_how)
    kind = records[index].info.kind
    choices = (
        dl.EVENT_DAMAGES
        if kind == fmt.Kind.EVENTS
        else (dl.FLOWGRAPH_DAMAGES if kind == fmt.Kind.FLOWGRAPH else dl.TABLE_DAMAGES)
    )
    return dl.damage_record(records, index, draw(st.sampled_from(sorted(choices))))


def _client(data_provider):
    plugin = GradscopePlugin(
        base_plugin.TBContext(data_provider=data_provider, sampling_hints=SAMPLES)
    )
    return werkzeug_test.Client(application.TensorBoardWSGI([plugin]))


def _getter(client, failures: list):
    def get(route, **params):
        response = client.get(PREFIX + route, query_string=params)
        text = response.get_data(as_text=True)
        if response.status_code >= 500 or "Traceback" in text or 'File "' in text:
            failures.append((route, params, response.status_code, text[-500:]))
        return (
            response.get_json()
            if response.status_code == 200 and not params.get("format")
            else None
        )

    return get


def _check_routes(client, run: str, damage: dl.Damage) -> None:
    failures: list = []
    get = _getter(client, failures)
    get("runs")
    info = get("run", run=run)
    for route in ("matrix", "flowgraph", "drift", "events", "conflict"):
        get(route, run=run)
        get(route, run=run, format="csv")
    if info and info["steps"]:
        get("matrix", run=run, step=info["steps"][0])
    served = dl.served(get, run, damage.records)
    assert not failures, (damage.name, failures)
    assert damage.kept <= served, (damage.name, sorted(damage.kept - served))


def _check_cli(logdir: str, damage: dl.Damage) -> None:
    for argv in (["report", logdir, "--format", "json"], ["check", logdir]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = cli.main(argv)
        text = out.getvalue() + err.getvalue()
        assert status in (0, 1, 2), (damage.name, argv, status, text[-2000:])
        assert "Traceback" not in text and "could not finish" not in text, (
            damage.name,
            argv,
            text[-2000:],
        )
        COUNTS[f"cli_{argv[0]}_exit_{status}"] = COUNTS.get(f"cli_{argv[0]}_exit_{status}", 0) + 1


@pytest.mark.slow
@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(damage=damaged_runs())
def test_one_damaged_record_never_breaks_routes_or_cli_python_backend(damage):
    with tempfile.TemporaryDirectory(prefix="gradscope_damage_") as logdir:
        dl.write_run(logdir, RUN, damage.records, damage.data)
        if (
            damage.name != "bytes:huge_length"
        ):  # TensorBoard's own loaders crash on it (docs/RELIABILITY.md)
            _check_routes(_client(providers.python_provider(logdir, SAMPLES)), RUN, damage)
        _check_cli(logdir, damage)
    COUNTS["python"] = COUNTS.get("python", 0) + 1
    COUNTS[damage.name] = COUNTS.get(damage.name, 0) + 1


def _loaded(data_provider, runs: set[str]) -> bool:
    ctx = tb_context.RequestContext()
    listed = data_provider.list_tensors(ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME)
    return set(listed) >= runs


@pytest.mark.slow
@settings(
    max_examples=RUST_BATCHES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    batch=st.lists(
        damaged_runs().filter(lambda d: d.name != "bytes:huge_length"),
        min_size=RUST_BATCH,
        max_size=RUST_BATCH,
    )
)
def test_one_damaged_record_never_breaks_routes_rust_backend(batch):
    with tempfile.TemporaryDirectory(prefix="gradscope_damage_rust_") as logdir:
        for i, damage in enumerate(batch):
            dl.write_run(logdir, f"run{i}", damage.records, damage.data)
        # Runs whose first record is damaged in its bytes hold nothing readable.
        expected = {
            f"run{i}" for i, d in enumerate(batch) if d.kept and not d.name.startswith("bytes:")
        }
        with providers.rust_provider(logdir, SAMPLES) as rust:
            deadline = time.monotonic() + 60
            while not _loaded(rust, expected):
                assert time.monotonic() < deadline, "the data server did not load the batch"
                time.sleep(0.2)
            time.sleep(0.5)  # runs damaged in their bytes load what precedes the damage
            client = _client(rust)
            for i, damage in enumerate(batch):
                _check_routes(client, f"run{i}", damage)
    COUNTS["rust"] = COUNTS.get("rust", 0) + len(batch)


@pytest.mark.slow
def test_property_examples_add_up_to_500():
    """Runs after the two properties (same session): >= 500 damaged runs in all."""
    total = COUNTS.get("python", 0) + COUNTS.get("rust", 0)
    print("\n" + ", ".join(f"{k}: {v}" for k, v in sorted(COUNTS.items())))
    assert total >= 500, COUNTS
