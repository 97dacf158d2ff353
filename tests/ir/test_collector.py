"""collector_paused / objects_frozen: what a compile leaves to the cyclic collector, and that it hands it back."""
from __future__ import annotations

import gc
import weakref

import pytest

from xgraph.ir.collector import collector_paused, objects_frozen


class _Node:
    def __init__(self):
        self.me = self  # a cycle: only the collector frees it


@pytest.fixture(autouse=True)
def _nothing_frozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_objects_left_by_a_paused_block_are_frozen_until_the_scope_ends():
    with objects_frozen():
        with collector_paused():
            kept = [_Node() for _ in range(100)]
        assert gc.get_freeze_count() >= 100
        assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    assert len(kept) == 100


def test_cyclic_garbage_made_inside_the_scope_is_collected_after_it():
    with objects_frozen():
        with collector_paused():
            node = _Node()
        ref = weakref.ref(node)
        del node
        gc.collect()
        assert ref() is not None  # frozen: the collector does not look at it yet
    gc.collect()
    assert ref() is None


def test_a_freeze_made_by_someone_else_is_left_in_place():
    keep = [_Node() for _ in range(10)]
    gc.freeze()
    before = gc.get_freeze_count()
    with objects_frozen():
        with collector_paused():
            more = [_Node() for _ in range(10)]
        assert gc.get_freeze_count() == before  # not ours to add to
    assert gc.get_freeze_count() == before
    assert len(keep) == len(more) == 10


def test_nested_scopes_unfreeze_once_the_outermost_ends():
    with objects_frozen():
        with objects_frozen():
            with collector_paused():
                kept = [_Node() for _ in range(10)]
        assert gc.get_freeze_count() >= 10
    assert gc.get_freeze_count() == 0
    assert len(kept) == 10


def test_a_compile_hands_every_object_back_to_the_collector(tmp_path):
    import numpy as np
    from xgraph import Graph, compile
    g = Graph("g")
    x = g.create_input("x", [1, 4], np.float32)
    g.create_op("a", "Relu", inputs=[x])
    g.set_outputs(["a"])
    compiled = compile(g)
    assert gc.get_freeze_count() == 0
    assert compiled.get_op_num() == 1
