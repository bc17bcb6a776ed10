"""TensorBoard's two real data providers over a logdir, for reading tests.

`python_provider` is the multiplexer backend (`--load_fast=false`);
`rust_provider` spawns the Rust data server (`--load_fast=true`), exactly as
TensorBoard does, and stops it on exit.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator, Mapping

from tensorboard import context as tb_context
from tensorboard.backend.event_processing import data_provider as mux_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.data import provider, server_ingester
from tensorboard.util import grpc_util

from tb_gradscope import format as fmt

EXPERIMENT = ""


def python_provider(
    logdir: str, samples_per_plugin: Mapping[str, int] | None = None
) -> provider.DataProvider:
    """A MultiplexerDataProvider that has loaded `logdir` once."""
    multiplexer = plugin_event_multiplexer.EventMultiplexer(
        size_guidance={}, tensor_size_guidance=dict(samples_per_plugin or {})
    )
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    return mux_provider.MultiplexerDataProvider(multiplexer, logdir)


@contextlib.contextmanager
def rust_provider(
    logdir: str, samples_per_plugin: Mapping[str, int] | None = None
) -> Iterator[provider.DataProvider]:
    """A GrpcDataProvider backed by a fresh `tensorboard_data_server` process."""
    ingester = server_ingester.SubprocessServerDataIngester(
        server_binary=server_ingester.get_server_binary(),
        logdir=logdir,
        reload_interval=0,
        channel_creds_type=grpc_util.ChannelCredsType.LOCAL,
        samples_per_plugin=dict(samples_per_plugin or {}),
    )
    ingester.start()
    try:
        yield ingester.data_provider
    finally:
        ingester._stdin_handle.close()  # --die-after-stdin: the server exits


def read_records(logdir: str) -> dict:
    """{run: {(kind, name): {step: Table or [documents]}}} read via the data provider."""
    provider = python_provider(logdir, {fmt.PLUGIN_NAME: 100000})
    ctx = tb_context.RequestContext()
    out: dict = collections.defaultdict(lambda: collections.defaultdict(dict))
    listing = provider.list_tensors(ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME)
    series = provider.read_tensors(
        ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME, downsample=100000
    )
    for run, tags in listing.items():
        for tag, meta in tags.items():
            info = fmt.parse_plugin_content(meta.plugin_content)
            for datum in series[run][tag]:
                out[run][(info.kind, info.name)][datum.step] = fmt.decode_table(info, datum.numpy)
    blobs = provider.list_blob_sequences(ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME)
    sequences = provider.read_blob_sequences(
        ctx, experiment_id="", plugin_name=fmt.PLUGIN_NAME, downsample=100000
    )
    for run, tags in blobs.items():
        for tag, meta in tags.items():
            info = fmt.parse_plugin_content(meta.plugin_content)
            for datum in sequences[run][tag]:
                docs = [provider.read_blob(ctx, blob_key=ref.blob_key) for ref in datum.values]
                out[run][(info.kind, info.name)][datum.step] = fmt.decode_blobs(info, docs)
    return {run: dict(kinds) for run, kinds in out.items()}
