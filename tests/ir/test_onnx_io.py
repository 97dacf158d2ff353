"""ONNX import/export on every model the onnx package ships: checker-clean and bit-identical in onnxruntime."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from xgraph import Graph, XGraphError
from xgraph.ir.links import check_links

DATA = Path(onnx.__file__).parent / "backend" / "test" / "data"
NODE_DIR_MODELS = sorted(p for d in ("pytorch-converted", "pytorch-operator", "simple")
                         for p in (DATA / d).glob("*/model.onnx"))
ZOO = sorted((DATA / "light").glob("*.onnx"))


def _inputs_for(model_path: Path, model: onnx.ModelProto) -> dict[str, np.ndarray] | None:
    ds = model_path.parent / "test_data_set_0"
    if not ds.is_dir():
        return None
    feeds = {}
    init = {i.name for i in model.graph.initializer}
    names = [i.name for i in model.graph.input if i.name not in init]
    for i, name in enumerate(names):
        f = ds / f"input_{i}.pb"
        if not f.exists():
            return None
        t = onnx.TensorProto()
        t.ParseFromString(f.read_bytes())
        feeds[name] = numpy_helper.to_array(t)
    return feeds


def _zoo_feeds(g: Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {t.name: rng.standard_normal(t.shape).astype(t.dtype) for t in g.get_input_tensors()}


def _ort_run(model_bytes: bytes, feeds):
    import onnxruntime as ort
    try:
        sess = ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"])
    except Exception as e:  # onnxruntime cannot load some conformance models (unsupported ops/types)
        pytest.skip(f"onnxruntime cannot load the original model: {str(e)[:80]}")
    return sess.run(None, feeds)


def _check_roundtrip(path: Path, feeds):
    original = onnx.load(str(path))
    g = Graph.from_onnx(path)
    check_links(g)
    exported = g.to_onnx()
    onnx.checker.check_model(exported, full_check=True)
    assert [n.op_type for n in exported.graph.node] == [n.op_type for n in original.graph.node]
    if feeds is None:
        return
    expected = _ort_run(original.SerializeToString(), feeds)
    got = _ort_run(exported.SerializeToString(), feeds)
    for e, o in zip(expected, got):
        np.testing.assert_array_equal(e, o)  # bit-identical


@pytest.mark.parametrize("path", NODE_DIR_MODELS, ids=lambda p: p.parent.name)
def test_node_models_roundtrip(path):
    _check_roundtrip(path, _inputs_for(path, onnx.load(str(path))))


@pytest.mark.zoo
@pytest.mark.parametrize("path", ZOO, ids=lambda p: p.stem)
def test_zoo_roundtrip_and_subgraphs(path):
    g = Graph.from_onnx(path)
    _check_roundtrip(path, _zoo_feeds(g))
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    kids = root.toposort_child_subgraph()
    half = root.merge_children(set(kids[: len(kids) // 2]))
    m = half.to_onnx()
    onnx.checker.check_model(m, full_check=True)
    assert {i.name for i in m.graph.input} >= {t.name for t in half.get_input_tensors()}


def test_shapes_dtypes_and_symbolic_dims():
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["batch", 4])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    m = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["h"]), onnx.helper.make_node("Relu", ["h"], ["y"])],
        "g", [x], [y], [w]), opset_imports=[onnx.helper.make_opsetid("", 17)])
    g = Graph.from_onnx(m.SerializeToString())
    assert g.get_tensor("h").shape == ("batch", 3) and g.get_tensor("h").dtype == np.float32
    assert g.get_tensor("w").is_const and g.get_tensor("w").data.shape == (4, 3)
    assert g.opset_imports[""] == 17


def test_custom_domain_and_nested_graphs_kept():
    then = onnx.helper.make_graph([onnx.helper.make_node("Neg", ["x"], ["t"])], "then", [],
                                  [onnx.helper.make_tensor_value_info("t", onnx.TensorProto.FLOAT, [2])])
    other = onnx.helper.make_graph([onnx.helper.make_node("Abs", ["x"], ["e"])], "else", [],
                                   [onnx.helper.make_tensor_value_info("e", onnx.TensorProto.FLOAT, [2])])
    nodes = [onnx.helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other),
             onnx.helper.make_node("Frob", ["y"], ["z"], domain="my.ip", strength=3, mode="fast")]
    m = onnx.helper.make_model(onnx.helper.make_graph(
        nodes, "g", [onnx.helper.make_tensor_value_info("c", onnx.TensorProto.BOOL, []),
                     onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2])]),
        opset_imports=[onnx.helper.make_opsetid("", 18), onnx.helper.make_opsetid("my.ip", 1)])
    g = Graph.from_onnx(m)
    frob = g.get_op("Frob")
    assert frob.domain == "my.ip" and frob.get_attr("strength") == 3 and frob.get_attr("mode") == "fast"
    assert isinstance(g.get_op("If").get_attr("then_branch"), onnx.GraphProto)
    out = g.to_onnx()
    assert out.graph.node[0].attribute[0].g == then or out.graph.node[0].attribute[1].g == then
    assert {(o.domain, o.version) for o in out.opset_import} == {("", 18), ("my.ip", 1)}


def test_external_data_loaded_from_model_folder(tmp_path):
    from onnx.external_data_helper import convert_model_to_external_data
    w = numpy_helper.from_array(np.arange(4096, dtype=np.float32).reshape(64, 64), "w")
    m = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 64])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1, 64])], [w]))
    convert_model_to_external_data(m, all_tensors_to_one_file=True, location="weights.bin", size_threshold=0)
    onnx.save(m, str(tmp_path / "m.onnx"))
    g = Graph.from_onnx(tmp_path / "m.onnx")
    np.testing.assert_array_equal(g.get_tensor("w").data, np.arange(4096, dtype=np.float32).reshape(64, 64))


@pytest.mark.parametrize("location, message", [
    ("/etc/passwd", "absolute"),
    ("../outside.bin", "'..'"),
    ("link.bin", "outside the model's folder"),
])
def test_external_data_traversal_refused(tmp_path, location, message):
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"\0" * 64)
    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "link.bin").symlink_to(outside)
    t = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=[4], data_location=onnx.TensorProto.EXTERNAL)
    t.external_data.add(key="location", value=location)
    m = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["x", "w"], ["y"])], "g",
        [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [4])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [4])], [t]))
    (model_dir / "m.onnx").write_bytes(m.SerializeToString())
    with pytest.raises(XGraphError, match=message):
        Graph.from_onnx(model_dir / "m.onnx")


@pytest.mark.parametrize("dims, message", [([1 << 20, 1 << 20], "over the .*-byte limit"), ([4, 4], "carries 16 bytes")])
def test_declared_size_checked_before_allocation(dims, message):
    t = onnx.TensorProto(name="w", data_type=onnx.TensorProto.FLOAT, dims=dims, raw_data=b"\0" * 16)
    m = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Identity", ["w"], ["y"])], "g", [],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [t]))
    with pytest.raises(XGraphError, match=message):
        Graph.from_onnx(m.SerializeToString())


@pytest.mark.parametrize("data, message", [
    (b"", "empty"),
    (b"\x08\x07garbage-not-protobuf\xff\xff", "not"),
    (b"PK\x03\x04 a zip file", "not"),
])
def test_damaged_bytes(tmp_path, data, message):
    p = tmp_path / "bad.onnx"
    p.write_bytes(data)
    with pytest.raises(XGraphError, match=message) as e:
        Graph.from_onnx(p)
    assert "bad.onnx" in str(e.value)


def test_truncated_zoo_model(tmp_path):
    data = ZOO[0].read_bytes()
    p = tmp_path / "cut.onnx"
    p.write_bytes(data[: len(data) // 2])
    with pytest.raises(XGraphError, match="cut.onnx"):
        Graph.from_onnx(p)


def _chain_model(nodes, inputs, output) -> onnx.ModelProto:
    """A model of `nodes` reading float inputs `inputs` and giving `output` (all of shape [1])."""
    vi = onnx.helper.make_tensor_value_info
    return onnx.helper.make_model(onnx.helper.make_graph(
        nodes, "g", [vi(x, 1, [1]) for x in inputs], [vi(output, 1, [1])]))


def test_dangling_edge_and_cycle_refused():
    mk = onnx.helper.make_node
    with pytest.raises(XGraphError, match="nowhere"):
        Graph.from_onnx(_chain_model([mk("Relu", ["nowhere"], ["y"])], [], "y"))
    with pytest.raises(XGraphError, match="cycle"):
        Graph.from_onnx(_chain_model([mk("Add", ["x", "b"], ["a"]), mk("Relu", ["a"], ["b"])], ["x"], "b"))
    with pytest.raises(XGraphError, match="defined twice"):
        Graph.from_onnx(_chain_model([mk("Relu", ["x"], ["y"]), mk("Neg", ["x"], ["y"])], ["x"], "y"))
    # out of file order first (a forward read), then a read of nothing: still refused
    late = [mk("Relu", ["a"], ["y"]), mk("Neg", ["x"], ["a"]), mk("Add", ["y", "nowhere"], ["z"])]
    with pytest.raises(XGraphError, match="'Add'.*reads tensor 'nowhere'|reads tensor 'nowhere'"):
        Graph.from_onnx(_chain_model(late, ["x"], "z"))


def test_nodes_out_of_file_order_are_sorted():
    mk = onnx.helper.make_node
    g = Graph.from_onnx(_chain_model([mk("Relu", ["a"], ["y"], name="second"), mk("Neg", ["x"], ["a"], name="first")],
                                     ["x"], "y"))
    assert [op.name for op in g.toposort()] == ["first", "second"]
    assert g.get_op("second").get_input_ops() == [g.get_op("first")]
