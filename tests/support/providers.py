"""TensorBoard's two real data providers over a logdir, for reading tests.

`python_provider` is the multiplexer backend (`--load_fast=false`);
`rust_provider` spawns the Rust data server (`--load_fast=true`), exactly as
TensorBoard does, and stops it on exit.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from tensorboard.backend.event_processing import data_provider as mux_provider
from tensorboard.backend.event_processing import plugin_event_multiplexer
from tensorboard.data import provider, server_ingester
from tensorboard.util import grpc_util

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
