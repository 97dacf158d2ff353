""".xmodel format 2 (attr values in one table), and files of an older format refused with a clear error."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import xgraph
from xgraph import Graph
from xgraph.errors import ModelFileError
from xgraph.ir.onnx.xmodel import META_KEY, VERSION

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "compile"))


def build_case(xgraph):
    """Compile the report test's mixed chain and add annotations and subgraph attrs of assorted types."""
    from test_report_golden import mixed_chain  # tests/compile
    g = xgraph.compile(mixed_chain(), {"min_subgraph_ops": 5})
    ops = g.get_ops()
    ops[0].set_attr("note", {"k": [1, 2], "s": "x"}, onnx_type=None)
    ops[1].set_attr("note", -1, onnx_type=None)
    ops[2].set_attr("weights_seen", np.arange(3, dtype=np.int64), onnx_type=None)
    ops[3].set_attr("flag", True, onnx_type=None)
    child = g.get_root_subgraph().toposort_child_subgraph()[0]
    child.set_attr("shape_hint", [1, (2, 3), 0.5])
    return g


def canonical(value):
    """An attr value as JSON that keeps its Python type: arrays as (dtype, list), tuples apart from lists."""
    if isinstance(value, np.ndarray):
        return ["array", str(value.dtype), value.tolist()]
    if isinstance(value, dict):
        return ["dict", {k: canonical(v) for k, v in value.items()}]
    if isinstance(value, (list, tuple)):
        return [type(value).__name__, [canonical(v) for v in value]]
    return [type(value).__name__, value]


def attr_state(g) -> dict:
    """Every attr the .xmodel stores: per op, per subgraph (by name, with its op names), the graph's."""
    subgraphs, stack = {}, [g.get_root_subgraph()]
    while stack:
        sg = stack.pop()
        subgraphs[sg.name] = [canonical(sg.get_attrs()), sorted(op.name for op in sg.get_ops())]
        stack.extend(sg.get_children())
    graph_attrs = {k: v for k, v in g.get_attrs().items() if k != "plugin_runs"}  # runs carry their seconds
    return {"ops": {op.name: canonical(op.get_attrs()) for op in g.get_ops()}, "subgraphs": subgraphs,
            "graph": canonical(graph_attrs)}


def _state(g: Graph) -> dict:
    """`attr_state` as JSON reads it back (tuples become lists on both sides), and the report."""
    return {**json.loads(json.dumps(attr_state(g))), "report": json.loads(json.dumps(xgraph.report(g), default=str))}


@pytest.fixture(scope="module")
def fresh() -> Graph:
    return build_case(xgraph)


def test_format2_round_trip_keeps_every_attr_and_the_report(tmp_path, fresh):
    fresh.serialize(tmp_path / "m.xmodel")
    m = onnx.load(str(tmp_path / "m.xmodel"))
    meta = json.loads(next(p.value for p in m.metadata_props if p.key == META_KEY))
    assert meta["version"] == VERSION == 2
    # every distinct value once: far fewer entries than annotated ops
    assert len(meta["values"]) < fresh.get_op_num() // 4
    assert set(meta["op_annotation_columns"]) >= {"device", "placement_reason", "kernel", "note"}
    again = Graph.deserialize(tmp_path / "m.xmodel")
    assert _state(again) == _state(fresh)


def test_shared_values_load_as_separate_objects(tmp_path, fresh):
    """Subgraphs of one device share one table entry for their runner map; an edit of one stays its own."""
    fresh.serialize(tmp_path / "m.xmodel")
    g = Graph.deserialize(tmp_path / "m.xmodel")
    children = [c for c in g.get_root_subgraph().get_children() if c.has_attr("runner")]
    by_device: dict = {}
    for c in children:
        by_device.setdefault(c.get_attr("device"), []).append(c)
    a, b = next(group for group in by_device.values() if len(group) > 1)[:2]
    assert a.get_attr("runner") == b.get_attr("runner")
    a.get_attr("runner")["run"] = "changed"
    assert b.get_attr("runner")["run"] != "changed"


def test_an_attr_whose_values_never_repeat_is_written_without_lookups(tmp_path):
    """After UNSHARED_AFTER new values in a row, a key's values are written as they come (one entry each), other
    keys still share theirs, and every value loads back as it was saved."""
    from test_report_golden import mixed_chain  # tests/compile
    from xgraph.ir.onnx.attr_columns import UNSHARED_AFTER
    g = Graph.from_onnx(mixed_chain(n=UNSHARED_AFTER * 2 + 8))
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    children = root.toposort_child_subgraph()
    assert len(children) > UNSHARED_AFTER + 4
    for i, child in enumerate(children):
        child.set_attr("roles", [{"op": child.name, "at": i}])  # new every time
        child.set_attr("shape_hint", [1, [2, 3]] if i % 2 else [4])  # two values, shared
    children[-1].set_attr("roles", [{"op": children[0].name, "at": 0}])  # a repeat, after the lookups stopped
    g.serialize(tmp_path / "m.xmodel")
    m = onnx.load(str(tmp_path / "m.xmodel"))
    meta = json.loads(next(p.value for p in m.metadata_props if p.key == META_KEY))
    entries = [json.dumps(v) for v in meta["values"]]
    assert len(entries) - len(set(entries)) == 1  # the late repeat is written twice; "shape_hint" twice shared
    again = Graph.deserialize(tmp_path / "m.xmodel")
    assert _state(again) == _state(g)


def _edit(tmp_path, fresh, edit) -> Path:
    fresh.serialize(tmp_path / "ok.xmodel")
    m = onnx.load(str(tmp_path / "ok.xmodel"))
    entry = next(p for p in m.metadata_props if p.key == META_KEY)
    meta = json.loads(entry.value)
    edit(meta)
    entry.value = json.dumps(meta)
    (tmp_path / "bad.xmodel").write_bytes(m.SerializeToString())
    return tmp_path / "bad.xmodel"


def _column(meta):
    return meta["op_annotation_columns"]["device"]


@pytest.mark.parametrize("edit, message", [
    (lambda m: m.update(version=3), "version 3 is not supported (this xgraph reads version 2)"),
    (lambda m: m.update(version="2"), "version '2' is not supported (this xgraph reads version 2)"),
    (lambda m: m.update(version=1), "version 1 was written by an older xgraph, which this one does not read"),
    (lambda m: m["tree"]["children"][0]["attrs"].update(device=True), "hold something other than value indices"),
    (lambda m: m.pop("values"), "'values' is missing"),
    (lambda m: m.update(op_annotation_columns=[]), "'op_annotation_columns' is missing"),
    (lambda m: _column(m).pop(), "column 'device' is not a list of one index per op"),
    (lambda m: _column(m).__setitem__(0, "0"), "column 'device' holds something other than value indices"),
    (lambda m: _column(m).__setitem__(0, -2), "column 'device' holds something other than value indices"),
    (lambda m: _column(m).__setitem__(0, 10 ** 6), "index 1000000 is not in the value table"),
    (lambda m: m["tree"]["children"][0]["attrs"].update(device=10 ** 6), "index 1000000 is not in the value table"),
    (lambda m: m["values"].__setitem__(_column(m)[0], ["s", 3]), "tagged 's' holds int"),
    (lambda m: m["values"].__setitem__(_column(m)[0], ["i", 3]), "attr 'device' = 3, which must be a str"),
])
def test_damaged_format2_metadata_is_refused(tmp_path, fresh, edit, message):
    with pytest.raises(ModelFileError, match="bad.xmodel") as e:
        Graph.deserialize(_edit(tmp_path, fresh, edit))
    assert message in str(e.value)
