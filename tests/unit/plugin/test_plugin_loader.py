"""The loader: TensorBoard finds it, its flag raises gradscope retention for both
backends, and nothing on the TensorBoard side imports tensorflow."""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest
from tensorboard import context as tb_context
from tensorboard import program
from tensorboard.backend.event_processing import data_ingester
from tensorboard.plugins import base_plugin
from tensorboard.plugins.core import core_plugin

from tb_gradscope import format as fmt
from tb_gradscope.plugin.loader import GradscopeLoader
from tb_gradscope.plugin.plugin import GradscopePlugin
from tb_gradscope.read import reader
from tests.support import plugin_fixtures as pf


def configure(*argv: str):
    tensorboard = program.TensorBoard(plugins=[core_plugin.CorePluginLoader, GradscopeLoader])
    tensorboard.configure(argv=["tensorboard", "--logdir", "/nonexistent", *argv])
    return tensorboard.flags


def test_entry_point_names_the_loader():
    (entry,) = [
        e
        for e in importlib.metadata.entry_points(group="tensorboard_plugins")
        if e.name == "gradscope"
    ]
    assert entry.load() is GradscopeLoader


def test_default_retention_is_bounded_and_large():
    flags = configure()
    assert flags.samples_per_plugin[fmt.PLUGIN_NAME] == reader.DEFAULT_SAMPLES
    assert 3_000 <= reader.DEFAULT_SAMPLES <= 100_000


def test_gradscope_samples_flag_sets_retention():
    assert configure("--gradscope_samples", "123").samples_per_plugin[fmt.PLUGIN_NAME] == 123
    assert configure("--gradscope_samples", "0").samples_per_plugin[fmt.PLUGIN_NAME] == 0


def test_samples_per_plugin_is_respected_unless_gradscope_samples_is_given():
    flags = configure("--samples_per_plugin", "images=3,gradscope=77")
    assert flags.samples_per_plugin == {"images": 3, fmt.PLUGIN_NAME: 77}
    flags = configure("--samples_per_plugin", "gradscope=77", "--gradscope_samples", "5")
    assert flags.samples_per_plugin[fmt.PLUGIN_NAME] == 5


def test_negative_retention_is_a_flags_error_naming_the_flag():
    with pytest.raises(base_plugin.FlagsError, match="--gradscope_samples"):
        configure("--gradscope_samples", "-1")


def test_load_returns_the_plugin_with_its_tab():
    plugin = GradscopeLoader().load(base_plugin.TBContext(data_provider=None, sampling_hints={}))
    assert isinstance(plugin, GradscopePlugin)
    meta = plugin.frontend_metadata()
    assert meta.es_module_path == "/index.js" and meta.tab_name == "Gradscope"


@pytest.mark.slow
def test_fixed_flags_keep_every_step_in_the_python_backend(tmp_path):
    """Without the loader TensorBoard keeps 10 points per gradscope tag."""
    steps = range(0, 40)
    pf.write_run(str(tmp_path), "r", pf.RunSpec(steps=steps, events=False, flowgraph=False))

    def kept(flags) -> list[int]:
        flags.logdir = str(tmp_path)
        ingester = data_ingester.LocalDataIngester(flags)
        ingester.deprecated_multiplexer.AddRunsFromDirectory(str(tmp_path))
        ingester.deprecated_multiplexer.Reload()
        hints = flags.samples_per_plugin
        plugin = GradscopePlugin(
            base_plugin.TBContext(data_provider=ingester.data_provider, sampling_hints=hints)
        )
        return plugin.run_impl(tb_context.RequestContext(), "", "r")["steps"]

    assert kept(configure()) == list(steps)
    unfixed = program.TensorBoard(plugins=[core_plugin.CorePluginLoader])
    unfixed.configure(argv=["tensorboard", "--logdir", str(tmp_path)])
    assert len(kept(unfixed.flags)) == 10


_NO_TF_SCRIPT = """
import json, sys
import tb_gradscope.plugin
from tb_gradscope.plugin import cache, encoding, export, loader, plugin, static, timeseries, views
from tb_gradscope.read import flowstate, reader
from tensorboard.plugins import base_plugin
p = loader.GradscopeLoader().load(base_plugin.TBContext(data_provider=None, sampling_hints={}))
p.get_plugin_apps()
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow")))
"""


def test_plugin_never_imports_tensorflow():
    out = subprocess.run(
        [sys.executable, "-c", _NO_TF_SCRIPT],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
