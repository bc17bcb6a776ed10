"""Variable names become a scope tree, with include/exclude and a depth cap."""

from __future__ import annotations

import pytest

from tb_gradscope import scopes


def test_leaf_scope_is_the_parent_path():
    assert scopes.leaf_scope("online/l1/kernel") == "online/l1"
    assert scopes.leaf_scope("Agent/layer2_1/w21:0") == "Agent/layer2_1"
    assert scopes.leaf_scope("bias") == "bias"
    assert scopes.variable_name("a:b:0") == "a:b"


def test_layout_rolls_up_every_ancestor_in_tree_order():
    layout = scopes.build_layout(
        ["online/l1/kernel", "online/l2/kernel", "target/l1/kernel", "online/l1/bias"]
    )
    assert layout.scopes == ("online", "online/l1", "online/l2", "target", "target/l1")
    members = dict(zip(layout.scopes, layout.members))
    assert members["online"] == (0, 1, 3)
    assert members["online/l1"] == (0, 3)
    assert members["target"] == (2,)


def test_include_exclude_and_depth_cap():
    names = ["a/b/c/k", "a/x/k", "t/b/k"]
    layout = scopes.build_layout(
        names, scopes.ScopeSpec(include=("a",), exclude=("a/x",), max_depth=2)
    )
    assert layout.variable_names == ("a/b/c/k",)
    assert layout.variable_leaf == ("a/b",)
    assert layout.scopes == ("a", "a/b")
    assert layout.dropped == ("a/x/k", "t/b/k")


def test_tree_order_keeps_subtrees_together():
    assert scopes.tree_order(["a-b", "a/b", "a", "a/a"]) == ["a", "a/a", "a/b", "a-b"]


def test_mapping_errors_name_the_variable():
    with pytest.raises(ValueError, match="variable 'w'"):
        scopes.build_layout(["w"], scopes.ScopeSpec(mapping=lambda name: None))
    with pytest.raises(ValueError, match="max_depth"):
        scopes.ScopeSpec(max_depth=0)


def test_tree_order_sorts_numbers_in_names_numerically():
    names = [
        "net/basic_block_10",
        "net/basic_block_8",
        "net",
        "net/basic_block_8/conv2",
        "net/basic_block_8/conv10",
        "net/head",
        "net/basic_block_9",
    ]
    assert scopes.tree_order(names) == [
        "net",
        "net/basic_block_8",
        "net/basic_block_8/conv2",
        "net/basic_block_8/conv10",
        "net/basic_block_9",
        "net/basic_block_10",
        "net/head",
    ]
