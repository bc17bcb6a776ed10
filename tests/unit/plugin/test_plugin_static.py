"""The frontend bundle is served from a whitelist of files that exist in static/."""

from __future__ import annotations

import os

import pytest
from tensorboard.backend import application
from tensorboard.plugins import base_plugin
from werkzeug import test as werkzeug_test

from tb_gradscope.plugin.plugin import GradscopePlugin
from tb_gradscope.plugin.static import StaticFiles

PREFIX = "/data/plugin/gradscope/"


@pytest.fixture
def static_dir(tmp_path):
    root = tmp_path / "static"
    (root / "chunks").mkdir(parents=True)
    (root / "index.js").write_text("export function render() {}\n")
    (root / "chunks" / "graph.js").write_text("export const g = 1;\n")
    (root / "style.css").write_text("body{}\n")
    (root / "notes.txt").write_text("not whitelisted\n")
    (root / ".hidden.js").write_text("hidden\n")
    (tmp_path / "secret.js").write_text("outside\n")
    os.symlink(tmp_path / "secret.js", root / "link.js")
    return root


@pytest.fixture
def client(static_dir):
    plugin = GradscopePlugin(
        base_plugin.TBContext(data_provider=None, sampling_hints={}), static_dir=static_dir
    )
    return werkzeug_test.Client(application.TensorBoardWSGI([plugin]))


def test_whitelist_is_the_folders_own_files_with_known_extensions(static_dir):
    assert sorted(StaticFiles(static_dir).names()) == ["chunks/graph.js", "index.js", "style.css"]


@pytest.mark.parametrize(
    "name,content_type",
    [
        ("index.js", "application/javascript"),
        ("chunks/graph.js", "application/javascript"),
        ("style.css", "text/css"),
    ],
)
def test_bundle_files_are_served_with_their_type(client, static_dir, name, content_type):
    response = client.get(PREFIX + name)
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith(content_type)
    assert response.get_data() == (static_dir / name).read_bytes()


@pytest.mark.parametrize(
    "path",
    [
        "notes.txt",
        ".hidden.js",
        "link.js",
        "../secret.js",
        "..%2fsecret.js",
        "chunks/../../secret.js",
        "chunks",
    ],
)
def test_anything_else_is_404(client, path):
    response = client.get(PREFIX + path)
    assert response.status_code == 404
    assert b"outside" not in response.get_data()


def test_a_bundle_built_while_tensorboard_runs_is_served(client, static_dir):
    assert client.get(PREFIX + "late.js").status_code == 404
    (static_dir / "late.js").write_text("export const late = 1;\n")
    assert client.get(PREFIX + "late.js").status_code == 200


def test_missing_static_folder_serves_nothing(tmp_path):
    plugin = GradscopePlugin(
        base_plugin.TBContext(data_provider=None, sampling_hints={}), static_dir=tmp_path / "absent"
    )
    client = werkzeug_test.Client(application.TensorBoardWSGI([plugin]))
    assert client.get(PREFIX + "index.js").status_code == 404
