"""The .xmodel file: lossless round trips, and clear errors for damaged or hostile files."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import xgraph
from xgraph import Graph, XGraphError
from xgraph.ir.links import check_links
from xgraph.ir.onnx.xmodel import META_KEY

attr_values = st.recursive(
    st.one_of(st.text(max_size=8), st.integers(-2**40, 2**40), st.booleans(),
              st.floats(allow_nan=False, width=64), st.none(),
              st.builds(lambda n: np.arange(n, dtype=np.float32), st.integers(0, 5))),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.text(min_size=1, max_size=5), inner, max_size=3)),
    max_leaves=6)


def build(seed: int, n: int) -> Graph:
    rng = np.random.default_rng(seed)
    g = Graph(f"g{seed}")
    x = g.create_input("x", ("batch", 4), np.float32)
    outs = [x]
    for i in range(n):
        k = int(rng.integers(1, min(3, len(outs)) + 1))
        picks = [outs[j] for j in sorted(rng.choice(len(outs), size=k, replace=False))]
        if rng.random() < 0.3:
            picks.append(g.create_const(f"w{i}", rng.standard_normal(4).astype(np.float32)))
        op = g.create_op(f"op{i}", "Sum", inputs=picks)
        op.get_output_tensor().dtype = np.float32
        op.get_output_tensor().shape = ("batch", 4)
        outs.append(op.get_output_tensor())
    g.set_outputs([t for t in outs[1:] if not t.consumers])
    return g


def snapshot(g: Graph):
    def norm(v):
        if isinstance(v, np.ndarray):
            return ("array", v.dtype.str, v.shape, v.tobytes())
        if isinstance(v, (list, tuple)):
            return (type(v).__name__, [norm(x) for x in v])
        if isinstance(v, dict):
            return ("dict", sorted((k, norm(x)) for k, x in v.items()))
        return (type(v).__name__, v)
    return {
        "name": g.name, "attrs": norm(g.get_attrs()),
        "ops": [(op.name, op.type, op.domain, [t and t.name for t in op.get_input_tensors()],
                 [t.name for t in op.get_output_tensors()], norm(op.get_attrs())) for op in g.get_ops()],
        "tensors": [(t.name, t.shape, str(t.dtype), norm(t.data) if t.is_const else None, norm(t.get_attrs()))
                    for t in g.get_tensors()],
        "io": ([t.name for t in g.get_input_tensors()], [t.name for t in g.get_output_tensors()]),
        "tree": sorted((s.name, s.depth, s.get_parent() and s.get_parent().name,
                        tuple(sorted(o.name for o in s.get_ops())), norm(s.get_attrs())) for s in g.iter_subgraphs()),
    }


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 1000), n=st.integers(1, 15), values=st.lists(attr_values, min_size=4, max_size=4),
       deep=st.booleans())
def test_serialize_roundtrip_is_lossless(tmp_path_factory, seed, n, values, deep):
    g = build(seed, n)
    g.set_attr("graph_attr", values[0])
    g.get_ops()[0].set_attr("note", values[1])
    g.get_tensor("x").set_attr("t", values[2])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    kids = root.toposort_child_subgraph()
    first = root.merge_children(set(kids[: max(1, len(kids) // 2)]))
    first.set_attr("device", "AICORE")
    first.set_attr("runner", {"run": "aicore", "sim": "aicore"})
    first.set_attr("extra", values[3])
    if deep and first.get_op_num() > 1:
        first.create_child_subgraph()
        first.get_children().pop().set_attr("level", 2)
    path = tmp_path_factory.mktemp("x") / "m.xmodel"
    g.serialize(path)
    h = Graph.deserialize(path)
    check_links(h)
    assert snapshot(h) == snapshot(g)
    assert snapshot(xgraph.load(path)) == snapshot(g)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 1000), n=st.integers(1, 15))
def test_onnx_roundtrip_keeps_graph(seed, n):
    g = build(seed, n)
    h = Graph.from_onnx(g.to_onnx())
    check_links(h)
    s, t = snapshot(g), snapshot(h)
    assert s["ops"] == t["ops"] and s["io"] == t["io"] and sorted(s["tensors"]) == sorted(t["tensors"])


def test_xmodel_is_plain_onnx(tmp_path, zoo_models):
    g = Graph.from_onnx(zoo_models[0])
    g.get_root_subgraph().create_child_subgraph()
    g.serialize(tmp_path / "m.xmodel")
    m = onnx.load(str(tmp_path / "m.xmodel"))
    onnx.checker.check_model(m)
    assert any(p.key == META_KEY for p in m.metadata_props)


def _meta_edit(tmp_path, edit):
    g = build(3, 6)
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    root.get_children().pop().set_attr("device", "CPU")
    g.serialize(tmp_path / "ok.xmodel")
    m = onnx.load(str(tmp_path / "ok.xmodel"))
    entry = next(p for p in m.metadata_props if p.key == META_KEY)
    meta = json.loads(entry.value)
    result = edit(meta)
    entry.value = result if isinstance(result, str) else json.dumps(meta)
    bad = tmp_path / "bad.xmodel"
    bad.write_bytes(m.SerializeToString())
    return bad


@pytest.mark.parametrize("edit, message", [
    (lambda m: "{not json", "not valid JSON"),
    (lambda m: m.update(version=99), "version"),
    (lambda m: m.pop("tree"), "'tree'"),
    (lambda m: m["tree"]["children"][0].update(ops=["op0", "op1"]) or m["tree"]["children"][1].update(ops=["op1"]), "both"),
    (lambda m: m["tree"]["children"].pop(), "leaves ops out"),
    (lambda m: m["tree"]["children"][0].update(ops=["ghost"]), "ghost"),
    (lambda m: m["graph"].update(attrs={"x": ["i", "not an int"]}), "tagged 'i'"),
    (lambda m: m["graph"].update(attrs={"x": ["a", "xgraph.attr/999"]}), "does not carry"),
    (lambda m: m["graph"].update(attrs={"x": ["q", 1]}), "tagged 'q'"),
    (lambda m: json.dumps(dict(m, graph={"name": "g", "attrs": {"x": json.loads("[" * 200 + "]" * 200)}})), "pair"),
])
def test_damaged_metadata(tmp_path, edit, message):
    bad = _meta_edit(tmp_path, edit)
    with pytest.raises(XGraphError, match=message) as e:
        Graph.deserialize(bad)
    assert "bad.xmodel" in str(e.value)


def test_plain_onnx_is_not_an_xmodel(tmp_path, zoo_models):
    with pytest.raises(XGraphError, match="not an .xmodel"):
        Graph.deserialize(zoo_models[0])
    assert xgraph.load(zoo_models[0]).get_op_num() > 0


def test_failed_serialize_keeps_old_file(tmp_path):
    g = build(1, 3)
    path = tmp_path / "m.xmodel"
    g.serialize(path)
    before = path.read_bytes()
    g.create_const("xgraph.attr/0", np.zeros(1, np.float32))  # a name .xmodel files reserve: cannot be saved
    with pytest.raises(XGraphError):
        g.serialize(path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.xmodel"]
