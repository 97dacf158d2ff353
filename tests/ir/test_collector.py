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


def _in_generation(obj) -> int:
    return next(i for i in range(3) if any(o is obj for o in gc.get_objects(generation=i)))


def test_a_graph_read_from_a_file_goes_to_the_oldest_generation_without_a_collection(tmp_path):
    """Else the first young collection after the read would walk every object of the graph, and the middle
    generation's next one again."""
    import numpy as np
    from xgraph import Graph
    g = Graph("g")
    x = g.create_input("x", [1, 4], np.float32)
    for i in range(50):
        x = g.create_op(f"r{i}", "Relu", inputs=[x]).get_output_tensor()
    g.set_outputs([x])
    path = tmp_path / "m.onnx"
    path.write_bytes(g.to_onnx().SerializeToString())
    gc.collect()
    from xgraph import load
    xmodel = tmp_path / "m.xmodel"
    Graph.from_onnx(path).serialize(xmodel)
    gc.collect()
    for read, src in ((Graph.from_onnx, path), (load, path), (load, xmodel), (Graph.deserialize, xmodel)):
        collections = [s["collections"] for s in gc.get_stats()]
        loaded = read(src)
        assert [s["collections"] for s in gc.get_stats()] == collections  # no collection walked it
        op = loaded.get_op("r7")
        assert _in_generation(op) == 2 and _in_generation(op._inputs) == 2 and gc.get_count()[0] < 50
        assert gc.isenabled() and gc.get_freeze_count() == 0


def test_reading_a_file_leaves_a_callers_freeze_and_a_disabled_collector_alone(tmp_path):
    import numpy as np
    from xgraph import Graph
    g = Graph("g")
    g.set_outputs([g.create_op("a", "Relu", inputs=[g.create_input("x", [1], np.float32)]).get_output_tensor()])
    path = tmp_path / "m.onnx"
    path.write_bytes(g.to_onnx().SerializeToString())
    keep = [_Node() for _ in range(10)]
    gc.freeze()
    before = gc.get_freeze_count()
    Graph.from_onnx(path)
    assert gc.get_freeze_count() == before  # not unfrozen, not added to
    gc.unfreeze()
    gc.disable()
    try:
        loaded = Graph.from_onnx(path)
        assert not gc.isenabled() and _in_generation(loaded.get_op("a")) == 0  # the caller manages the collector
    finally:
        gc.enable()
    assert len(keep) == 10
