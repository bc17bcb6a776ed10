"""A logdir's gradscope runs, loaded through TensorBoard's own ingestion (the command line's way in).

`load_logdir` hands the logdir (minus what `read.eventfiles` finds unsafe) to
TensorBoard's Python multiplexer, reads every run with the plugin's
`read.reader.Reader` keeping every recorded step, and decodes each with
`read.runs.decode_run`, so the command line sees exactly what the Gradscope
tab sees. Series of the same (kind, name) written under several layout tags
(`~1`, `~2`) are merged by step. Never imports tensorflow.
"""

from __future__ import annotations

import os
import sys
import tempfile
import types

from tensorboard import context as tb_context
from tensorboard.data import provider

from tb_gradscope import format as fmt
from tb_gradscope.read.eventfiles import damaged_event_files, mirror_safe_part, unsafe_event_files
from tb_gradscope.read.reader import DEFAULT_SAMPLES, Reader, RunListing
from tb_gradscope.read.runs import RunLogs, decode_run

EXPERIMENT = ""


class LogdirError(Exception):
    """The logdir cannot be used; the message says why and what to do."""


def load_logdir(logdir: str, run: str | None = None) -> list[RunLogs]:
    """Every run of `logdir` holding gradscope records (or only `run`).

    Raises:
      LogdirError: the logdir is missing, has no gradscope data, or has no
        run named `run`.
    """
    if not os.path.isdir(logdir):
        raise LogdirError(f"logdir {logdir!r} does not exist or is not a directory")
    _prefer_tensorflow_stub()
    unsafe = unsafe_event_files(logdir)
    if unsafe:
        with tempfile.TemporaryDirectory(prefix="gradscope_read_") as mirror:
            mirror_safe_part(logdir, mirror, unsafe)
            data_provider = local_data_provider(mirror, samples=0)  # loads everything now
    else:
        data_provider = local_data_provider(logdir, samples=0)
    reader = Reader(data_provider, downsample=0)
    ctx = tb_context.RequestContext()
    listings = reader.list_runs(ctx, EXPERIMENT)
    if not listings:
        all_runs = sorted(
            r.run_name for r in data_provider.list_runs(ctx, experiment_id=EXPERIMENT)
        )
        found = (
            f"{len(all_runs)} TensorBoard run(s), none with"
            if all_runs
            else "no event files and no"
        )
        skipped = "".join(f"; {problem.message}" for problem in unsafe.values())
        raise LogdirError(
            f"logdir {logdir!r} has no gradscope data ({found} gradscope records{skipped}); "
            "record training with tb_gradscope.Recorder, or point at the right logdir"
        )
    if not any(listing.records for listing in listings.values()):
        reasons = [w for listing in listings.values() for w in listing.warnings]
        raise LogdirError(
            f"logdir {logdir!r} has gradscope records but none can be read: "
            + "; ".join(reasons[:3])
            + (f" (and {len(reasons) - 3} more)" if len(reasons) > 3 else "")
        )
    if run is not None:
        if run not in listings:
            raise LogdirError(
                f"run {run!r} has no gradscope data in {logdir!r}; runs: {sorted(listings)}"
            )
        listings = {run: listings[run]}
    loaded = [_load_run(reader, ctx, listings[name]) for name in sorted(listings)]
    for logs in loaded:
        logs.logdir_warnings.extend(
            p.message for p in unsafe.values() if p.run == logs.run and p.keep is None
        )
        logs.logdir_warnings.extend(damaged_event_files(logdir, logs.run))
    return loaded


def _load_run(reader: Reader, ctx, listing: RunListing) -> RunLogs:
    tables = [r for r in listing.records.values() if fmt.KIND_SPECS[r.info.kind].is_table]
    blobs = [r for r in listing.records.values() if not fmt.KIND_SPECS[r.info.kind].is_table]
    series, table_warnings = reader.read_tables(ctx, EXPERIMENT, listing.run, tables)
    documents, blob_warnings = reader.read_blobs(ctx, EXPERIMENT, listing.run, blobs)
    return decode_run(listing, series, documents, {**table_warnings, **blob_warnings})


def local_data_provider(logdir: str, samples: int = DEFAULT_SAMPLES) -> provider.DataProvider:
    """A data provider over `logdir` through TensorBoard's own Python
    ingestion, loaded once, keeping `samples` points per gradscope series
    (0 = all). For the command line (`tb-gradscope report/check/doctor`).

    TensorBoard's Python ingestion reads files through tensorflow's gfile
    when tensorflow is installed (as `tensorboard --load_fast=false` does), so
    calling this may import tensorflow (`load_logdir` prevents it when
    tensorflow is not loaded already); importing this module does not."""
    from tensorboard.backend.event_processing import data_provider as mux_provider
    from tensorboard.backend.event_processing import plugin_event_multiplexer

    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        tensor_size_guidance={fmt.PLUGIN_NAME: samples}
    )
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    return mux_provider.MultiplexerDataProvider(multiplexer, logdir)


def _prefer_tensorflow_stub() -> None:
    """Makes TensorBoard's ingestion use its bundled TF stub, not tensorflow.

    TensorBoard's event reading resolves `tensorboard.compat.tf` to the real
    tensorflow when it is installed (seconds of import for a read-only tool);
    the presence of a `tensorboard.compat.notf` module is TensorBoard's own
    switch to the stub. Done only when tensorflow is not loaded already.
    """
    if "tensorflow" not in sys.modules and "tensorboard.compat.notf" not in sys.modules:
        sys.modules["tensorboard.compat.notf"] = types.ModuleType("tensorboard.compat.notf")
