"""Attrs that xgraph reads back from an .xmodel are checked by type and range at load: a damaged or
hand-edited value is a ModelFileError naming the subgraph/op and the key, for the API and every
command, instead of a ValueError deep in a view or the runtime."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import xgraph
from xgraph.errors import ModelFileError

vi = helper.make_tensor_value_info


def compiled(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                               helper.make_node("TopK", ["r", "k"], ["y", "i"], name="topk", axis=1)], "attrs",
                              [vi("x", TensorProto.FLOAT, [1, 8])],
                              [vi("y", TensorProto.FLOAT, None), vi("i", TensorProto.INT64, None)],
                              [helper.make_tensor("k", TensorProto.INT64, [1], [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return xgraph.compile(model.SerializeToString())


def _subgraph(g):
    return g.get_root_subgraph().toposort_child_subgraph()[0]


EDITS = [
    ("memory array", lambda g: _subgraph(g).set_attr("memory", np.zeros(2)), "'memory'"),
    ("memory word", lambda g: _subgraph(g).set_attr("memory", "shared"), "'memory'"),
    ("device int", lambda g: _subgraph(g).set_attr("device", 7), "'device'"),
    ("runner list", lambda g: _subgraph(g).set_attr("runner", ["cpu"]), "'runner'"),
    ("time 10**400", lambda g: _subgraph(g).set_attr("estimated_time_us", 10 ** 400), "'estimated_time_us'"),
    ("time negative", lambda g: _subgraph(g).set_attr("estimated_time_us", -1.0), "'estimated_time_us'"),
    ("time text", lambda g: _subgraph(g).set_attr("estimated_time_us", "fast"), "'estimated_time_us'"),
    ("reason array", lambda g: g.get_op("relu").set_attr("placement_reason", np.ones(3), onnx_type=None),
     "'placement_reason'"),
    ("kernel array", lambda g: g.get_op("relu").set_attr("kernel", np.ones(3), onnx_type=None), "'kernel'"),
    ("plugin runs", lambda g: g.set_attr("plugin_runs", [{"name": 3}]), "'plugin_runs'"),
    ("options", lambda g: g.set_attr("compile_options", "[1]"), "'compile_options'"),
]


@pytest.mark.parametrize("case, edit, key", EDITS, ids=[e[0] for e in EDITS])
def test_damaged_attrs_are_refused_at_load_naming_where_and_key(tmp_path, case, edit, key):
    g = compiled(tmp_path)
    edit(g)
    path = tmp_path / "bad.xmodel"
    g.serialize(path)
    for load in (xgraph.load, xgraph.Graph.deserialize):
        with pytest.raises(ModelFileError) as e:
            load(path)
        message = str(e.value)
        assert key in message and "bad.xmodel" in message, message
        assert ("subgraph" in message or "op 'relu'" in message or "graph 'attrs'" in message), message


@pytest.mark.parametrize("command", [["inspect"], ["svg", "{out}.svg"], ["html", "{out}.html"], ["dump"],
                                     ["run", "--random"], ["verify"], ["bench", "--runs", "1", "--warmup", "0"]])
def test_every_command_says_so_in_one_line(tmp_path, command):
    g = compiled(tmp_path)
    _subgraph(g).set_attr("memory", np.zeros(2))
    g.set_attr("x", 1)
    g.serialize(tmp_path / "bad.xmodel")
    args = [a.format(out=tmp_path / "out") for a in command]
    r = subprocess.run([sys.executable, "-m", "xgraph.cli.main", args[0], str(tmp_path / "bad.xmodel"), *args[1:]],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "'memory'" in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not list(tmp_path.glob("out*"))


def test_what_xgraph_writes_loads_and_runs(tmp_path):
    g = compiled(tmp_path)
    _subgraph(g).set_attr("estimated_time_us", 12.5)
    g.serialize(tmp_path / "ok.xmodel")
    h = xgraph.load(tmp_path / "ok.xmodel")
    report = xgraph.report(h)
    assert {o["name"] for o in report["ops"]} == {"relu", "topk"}
    x = np.array([[3, -1, 5, 0, 2, 8, -4, 1]], np.float32)
    with xgraph.create_graph_runner(h) as runner:
        y, i = runner.run({"x": x})
    np.testing.assert_array_equal(y, [[8, 5, 3]])
    np.testing.assert_array_equal(i, [[5, 2, 0]])
