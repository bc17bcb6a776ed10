"""The per-run cache: reused while TensorBoard has nothing newer, refreshed
(only what changed) when it has; and the steps offered are the steps kept."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import pytest
from tensorboard import context as tb_context
from tensorboard import errors
from tensorboard.backend.event_processing import data_provider as mux_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.plugins import base_plugin

from tb_gradscope import format as fmt
from tb_gradscope.plugin import views
from tb_gradscope.plugin.cache import RunCache
from tb_gradscope.plugin.plugin import GradscopePlugin
from tb_gradscope.read import reader
from tb_gradscope.read.logdir import local_data_provider
from tests.support import plugin_fixtures as pf
from tests.support import providers

CTX = tb_context.RequestContext()


def _plugin(data_provider, samples: int, refresh_seconds: float = 0.0) -> GradscopePlugin:
    hints = {fmt.PLUGIN_NAME: samples}
    context = base_plugin.TBContext(data_provider=data_provider, sampling_hints=hints)
    return GradscopePlugin(context, refresh_seconds=refresh_seconds)


def _loaded_multiplexer(logdir: str) -> plugin_event_multiplexer.EventMultiplexer:
    """TensorBoard's Python multiplexer over `logdir`, every gradscope point kept, loaded once."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={fmt.PLUGIN_NAME: 0}
    )
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    return multiplexer


@pytest.mark.slow
def test_cache_rereads_only_when_tensorboard_has_newer_data(tmp_path):
    logdir = str(tmp_path)
    pf.write_run(logdir, "live", pf.RunSpec(steps=range(0, 10), flowgraph=True, events=True))
    multiplexer = _loaded_multiplexer(logdir)
    plugin = _plugin(mux_provider.MultiplexerDataProvider(multiplexer, logdir), 0)
    cache = plugin._cache

    assert plugin.run_impl(CTX, "", "live")["steps"] == list(range(10))
    first_reads = cache.reads
    assert first_reads == len(pf.LOSSES) + 3 + 2  # tables + flowgraph + events
    for step in range(10):
        plugin.matrix_impl(CTX, "", "live", step)
    plugin.series_impl(CTX, "", "live", "grad_stats", "td", "online", "l2", 100)
    assert cache.reads == first_reads, "nothing new: no series is read again"

    # A second writer (a resumed job) adds steps without a flowgraph.
    pf.write_run(logdir, "live", pf.RunSpec(steps=range(10, 15), flowgraph=False, events=False))
    multiplexer.Reload()
    assert plugin.run_impl(CTX, "", "live")["steps"] == list(range(15))
    assert cache.reads == first_reads + len(pf.LOSSES) + 3, "unchanged blob records are reused"
    assert plugin.matrix_impl(CTX, "", "live", None)["step"] == 14


def test_findings_and_violations_are_concluded_once_per_change_of_the_run(tmp_path):
    """The cache, not the decoded run, keeps what the findings and violations
    routes conclude (`RunLogs` is data and imports no detector)."""
    logdir = str(tmp_path)
    pf.write_run(logdir, "live", pf.RunSpec(steps=range(0, 4), flowgraph=True, events=True))
    multiplexer = _loaded_multiplexer(logdir)
    plugin = _plugin(mux_provider.MultiplexerDataProvider(multiplexer, logdir), 0)
    first = plugin._cache.get(CTX, "", "live")
    found, checked = first.findings, first.checked
    assert plugin.findings_impl(CTX, "", "live")["run"] == "live"
    assert plugin.violations_impl(CTX, "", "live")["run"] == "live"
    again = plugin._cache.get(CTX, "", "live")
    assert again is first and again.findings is found and again.checked is checked

    pf.write_run(logdir, "live", pf.RunSpec(steps=range(4, 6), flowgraph=False, events=False))
    multiplexer.Reload()
    changed = plugin._cache.get(CTX, "", "live")
    assert changed is not first and changed.checked is not checked
    assert changed.logs.steps[-1] == 5


def test_listing_is_asked_at_most_once_per_refresh_interval(tmp_path):
    logdir = str(tmp_path)
    pf.write_run(logdir, "r", pf.RunSpec(steps=range(0, 3), events=False))
    plugin = _plugin(providers.python_provider(logdir), 0, refresh_seconds=0.5)
    for step in range(3):
        plugin.matrix_impl(CTX, "", "r", step)
    assert plugin._cache.listings == 1
    time.sleep(0.6)
    plugin.matrix_impl(CTX, "", "r", 0)
    assert plugin._cache.listings == 2


class CountingProvider(mux_provider.MultiplexerDataProvider):
    """TensorBoard's own provider, counting blob reads."""

    blob_reads = 0

    def read_blob(self, ctx=None, *, blob_key):
        self.blob_reads += 1
        return super().read_blob(ctx, blob_key=blob_key)


def test_new_event_steps_are_read_without_rereading_old_ones(tmp_path):
    logdir = str(tmp_path)
    pf.write_run(logdir, "ev", pf.RunSpec(steps=range(0, 30), flowgraph=False))
    multiplexer = _loaded_multiplexer(logdir)
    data_provider = CountingProvider(multiplexer, logdir)
    plugin = _plugin(data_provider, 0)
    first = sum(len(pf.events_at(s)) for s in range(0, 30))
    assert len(plugin.events_impl(CTX, "", "ev")["events"]) == first
    assert data_provider.blob_reads == first

    pf.write_run(logdir, "ev", pf.RunSpec(steps=range(30, 60), flowgraph=False))
    multiplexer.Reload()
    total = sum(len(pf.events_at(s)) for s in range(0, 60))
    assert len(plugin.events_impl(CTX, "", "ev")["events"]) == total
    assert data_provider.blob_reads == total, "old event steps are not read again"


class HeldProvider(mux_provider.MultiplexerDataProvider):
    """TensorBoard's own provider, whose next series read can be held after it
    has read, as a request thread that lost the CPU would be."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.hold: threading.Event | None = None
        self.held = threading.Event()

    def read_tensors(self, ctx=None, **kwargs):
        data = super().read_tensors(ctx, **kwargs)
        hold, self.hold = self.hold, None
        if hold is not None:
            self.held.set()
            hold.wait(30)
        return data


def test_a_run_read_while_every_run_is_listed_anew_is_listed_again(tmp_path):
    """A run first read while the status route lists every run anew may be
    older than that status answer: within its second it is listed again, not
    served (the tab, told the run changed, would keep the older steps)."""
    logdir = str(tmp_path)
    pf.write_run(logdir, "a", pf.RunSpec(steps=range(0, 3), flowgraph=False, events=False))
    multiplexer = _loaded_multiplexer(logdir)
    data_provider = HeldProvider(multiplexer, logdir)
    plugin = _plugin(data_provider, 0, refresh_seconds=60.0)
    release = threading.Event()
    data_provider.hold = release
    with futures.ThreadPoolExecutor(1) as pool:
        first = pool.submit(plugin.run_impl, CTX, "", "a")
        assert data_provider.held.wait(30), "the run's read never started"
        pf.write_run(logdir, "a", pf.RunSpec(steps=range(3, 5), flowgraph=False, events=False))
        multiplexer.Reload()
        status = plugin.status_impl(CTX, "")["runs"]
        release.set()
        assert first.result(timeout=30)["steps"] == [0, 1, 2]
    assert [r["last_step"] for r in status] == [4]
    assert plugin.run_impl(CTX, "", "a")["steps"] == list(range(5))


@pytest.mark.parametrize("backend", ["python", "rust"])
def test_steps_offered_are_the_steps_kept(tmp_path, backend):
    """With a retention below the run's length, every step the run route
    offers has a matrix, and the others are 404."""
    logdir = str(tmp_path)
    written = range(0, 60)
    pf.write_run(logdir, "long", pf.RunSpec(steps=written, events=False))
    retention = {fmt.PLUGIN_NAME: 12}
    if backend == "python":
        _check_kept_steps(providers.python_provider(logdir, retention), written)
        return
    with providers.rust_provider(logdir, retention) as rust:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listing = rust.list_tensors(CTX, experiment_id="", plugin_name=fmt.PLUGIN_NAME).get(
                "long", {}
            )
            if listing and max(t.max_step for t in listing.values()) == written[-1]:
                break
            time.sleep(0.2)
        _check_kept_steps(rust, written)


def _check_kept_steps(data_provider, written: range) -> None:
    plugin = _plugin(data_provider, 12)
    steps = plugin.run_impl(CTX, "", "long")["steps"]
    assert 0 < len(steps) <= 12 and steps == sorted(steps)
    assert steps[-1] == written[-1], "the newest step is always kept"
    for step in steps:
        assert plugin.matrix_impl(CTX, "", "long", step)["losses"] == sorted(pf.LOSSES)
    dropped = next(s for s in written if s not in steps)
    with pytest.raises(errors.NotFoundError, match=f"step {dropped} is not kept"):
        plugin.matrix_impl(CTX, "", "long", dropped)


def test_local_data_provider_serves_the_command_line(tmp_path):
    logdir = pf.write_standard_logdir(str(tmp_path))
    read = reader.Reader(local_data_provider(logdir))
    assert sorted(read.list_runs(CTX, "")) == sorted([pf.MAIN_RUN, pf.HOSTILE_RUN, "broken"])
    listing = read.list_run(CTX, "", pf.MAIN_RUN)
    tables, warnings = read.read_tables(CTX, "", pf.MAIN_RUN, listing.of_kind(fmt.Kind.GRAD_STATS))
    assert warnings == {}
    td = tables[fmt.tag_for(fmt.Kind.GRAD_STATS, "td")]
    assert td.steps.tolist() == list(range(pf.LAYOUT_CHANGE))
    assert td.values[3].tolist() == pf.grad_table("td", pf.SCOPES, 3).tolist()
    assert read.list_run(CTX, "", "plain") is None
    logs = RunCache(read).get(CTX, "", pf.MAIN_RUN).logs
    assert views.matrix(logs, 5)["cells"]["td"]["target/l1"]["state"] == fmt.BLOCKED
