"""Source lines of blocked edges: which frames are the user's, and relative paths."""

from __future__ import annotations

import os

import tensorflow as tf

import tb_gradscope
from tb_gradscope.analysis._source import is_library_frame, relative_path, user_source

PACKAGE = os.path.dirname(os.path.abspath(tb_gradscope.__file__))


def test_library_frames_are_skipped_but_demos_and_user_code_are_not():
    assert is_library_frame(tf.__file__)
    assert is_library_frame(os.path.join(PACKAGE, "record", "recorder.py"))
    assert is_library_frame("<frozen runpy>")
    assert not is_library_frame(os.path.join(PACKAGE, "demos", "dqn.py"))
    assert not is_library_frame(os.path.abspath(__file__))


def test_paths_under_the_working_directory_become_relative(tmp_path):
    inside = tmp_path / "proj" / "train.py"
    assert relative_path(str(inside), cwd=str(tmp_path)) == os.path.join("proj", "train.py")
    assert relative_path("/elsewhere/train.py", cwd=str(tmp_path)) == "/elsewhere/train.py"
    assert relative_path(str(tmp_path) + "x/train.py", cwd=str(tmp_path)).startswith("/")


def test_user_source_is_the_line_that_created_the_op():
    graph = tf.Graph()
    with graph.as_default():
        op = tf.stop_gradient(tf.constant(1.0)).op
    line = user_source(op)
    assert line.file == os.path.relpath(__file__)
    assert line.function == "test_user_source_is_the_line_that_created_the_op"
    source = open(__file__).read().splitlines()[line.line - 1]
    assert "tf.stop_gradient" in source


def test_demo_files_are_named_from_the_package_wherever_it_lives(tmp_path):
    from tb_gradscope.demos import dqn

    assert relative_path(dqn.__file__, cwd=str(tmp_path)) == os.path.join(
        "tb_gradscope", "demos", "dqn.py"
    )
