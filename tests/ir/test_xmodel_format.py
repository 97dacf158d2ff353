""".xmodel format 2 (attr values in one table) and files of format 1, as xgraph wrote them before.

`data/format1_mixed_chain.xmodel` was written by the format-1 writer from `format1_case.build_case`
(a compiled mixed chain plus annotations and subgraph attrs of assorted types), and
`data/format1_mixed_chain.json` is `format1_case.attr_state` of that file as the same xgraph
read it back. Loading it now must give exactly that state.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import onnx
import pytest

import xgraph
from xgraph import Graph
from xgraph.errors import ModelFileError
from xgraph.ir.onnx.xmodel import META_KEY, VERSION

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE.parent / "compile"))
sys.path.insert(0, str(HERE))

from format1_case import attr_state, build_case  # noqa: E402


def _state(g: Graph) -> dict:
    """`attr_state` as JSON reads it back (tuples become lists on both sides), and the report."""
    return {**json.loads(json.dumps(attr_state(g))), "report": json.loads(json.dumps(xgraph.report(g), default=str))}


@pytest.fixture(scope="module")
def fresh() -> Graph:
    return build_case(xgraph)


def test_a_format1_file_loads_as_the_format1_reader_read_it(tmp_path):
    old = Graph.deserialize(HERE / "data" / "format1_mixed_chain.xmodel")
    expected = json.loads((HERE / "data" / "format1_mixed_chain.json").read_text(encoding="utf-8"))
    assert json.loads(json.dumps(attr_state(old))) == expected
    assert xgraph.load(HERE / "data" / "format1_mixed_chain.xmodel").get_op_num() == len(expected["ops"])
    old.serialize(tmp_path / "m.xmodel")  # format 1 in, format 2 out: the same state
    assert json.loads(json.dumps(attr_state(Graph.deserialize(tmp_path / "m.xmodel")))) == expected


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
    (lambda m: m.update(version=3), "version 3 is not supported (this xgraph reads versions 1, 2)"),
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
