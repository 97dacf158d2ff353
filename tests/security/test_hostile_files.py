"""Hostile model files: each refusal rule, with an XGraphError that names the file and the rule.

Rules already tested in tests/ir (absolute/'..'/symlinked external data, a raw initializer of
the wrong size or over 1 TiB, empty/garbage/truncated bytes, dangling edges, cycles, outputs
defined twice, and the basic .xmodel metadata damage) are not repeated here; these cover the
rest: hard links, odd locations, overlapping ranges, tensors hidden in attributes, sparse
tensors, nested graphs and function bodies, names, .xmodel metadata types, runner names,
and what saving may write.
"""
from __future__ import annotations

import json
import os
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph import Graph, XGraphError
from xgraph.errors import ModelFileError, RunnerError
from xgraph.ir.onnx import external_data, tensor_inventory
from xgraph.ir.links import check_links
from xgraph.ir.onnx.xmodel import ARRAY_PREFIX, META_KEY

vi = helper.make_tensor_value_info
OPSET = [helper.make_opsetid("", 17)]


def model_with(nodes, inputs=(), outputs=("y",), initializers=(), sparse=(), functions=(), opsets=OPSET):
    """A float model around `nodes`; outputs are float tensors of unknown shape."""
    graph = helper.make_graph(list(nodes), "hostile", [vi(n, TensorProto.FLOAT, [4]) for n in inputs],
                              [vi(n, TensorProto.FLOAT, None) for n in outputs], list(initializers),
                              sparse_initializer=list(sparse))
    return helper.make_model(graph, functions=list(functions), opset_imports=list(opsets))


def save(model: onnx.ModelProto, folder: Path, name: str = "hostile.onnx") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(model.SerializeToString())
    return path


def refused(src, *rule: str, loader=Graph.from_onnx) -> str:
    """Load `src`, expect a ModelFileError naming the file (for paths) and every part of `rule`."""
    with pytest.raises(XGraphError) as e:
        loader(src)
    message = str(e.value)
    if isinstance(src, Path):
        assert src.name in message, message
    for part in rule:
        assert part in message, message
    return message


def external(name: str, location: str, dims=(4,), **extra) -> onnx.TensorProto:
    t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims), data_location=TensorProto.EXTERNAL)
    t.external_data.add(key="location", value=location)
    for k, v in extra.items():
        t.external_data.add(key=k, value=str(v))
    return t


def add_model(*initializers) -> onnx.ModelProto:
    names = [t.name for t in initializers]
    return model_with([helper.make_node("Sum", names, ["y"])], initializers=initializers)


# -- external data: where it may come from ----------------------------------------------------------
@pytest.fixture
def folders(tmp_path):
    """model/ with weights.bin (64 bytes); secret.bin outside it."""
    (tmp_path / "secret.bin").write_bytes(b"S" * 64)
    model = tmp_path / "model"
    model.mkdir()
    (model / "weights.bin").write_bytes(np.arange(16, dtype=np.float32).tobytes())
    return tmp_path, model


def test_hard_link_to_a_file_outside_is_refused(folders):
    top, model = folders
    os.link(top / "secret.bin", model / "alias.bin")
    path = save(add_model(external("w", "alias.bin")), model)
    refused(path, "'w'", "alias.bin", "hard links")


@pytest.mark.parametrize("location, rule", [
    ("weights.bin\0../secret.bin", "NUL byte"),
    ("x" * 5000, "cannot be resolved"),
    ("..\\secret.bin", "'..'"),
    ("C:secret.bin", "absolute"),
    ("\\\\server\\share\\w.bin", "absolute"),
    ("sub", "not a regular file"),
    ("missing.bin", "does not exist"),
    ("loop.bin", "cannot be resolved"),
])
def test_odd_locations_are_refused(folders, location, rule):
    _, model = folders
    (model / "sub").mkdir()
    (model / "loop.bin").symlink_to(model / "loop.bin")
    refused(save(add_model(external("w", location)), model), "'w'", rule)


@pytest.mark.parametrize("extra, rule", [
    ({"offset": 60}, "reads bytes 60..76"),
    ({"offset": -4}, "reads bytes -4..12"),
    ({"length": 8}, "declares 16 bytes but its external data is 8"),
    ({"offset": "1e3"}, "non-integer"),
    ({"length": "9" * 5000}, "non-integer"),
])
def test_offsets_and_lengths_are_checked_against_the_file(folders, extra, rule):
    _, model = folders
    refused(save(add_model(external("w", "weights.bin", **extra)), model), "'w'", rule)


def test_overlapping_ranges_are_refused(folders):
    """Many tensors reading the same bytes would turn a small file into a lot of memory."""
    _, model = folders
    tensors = [external(f"w{i}", "weights.bin", dims=(16,)) for i in range(3)]
    refused(save(add_model(*tensors), model), "'w0'", "'w1'", "overlapping", "weights.bin")
    (model / "big.bin").write_bytes(bytes(4 << 20))
    aliases = save(add_model(*[external(f"a{i}", "big.bin", dims=(1 << 20,)) for i in range(50)]), model, "alias.onnx")
    assert _peak_bytes(lambda: Graph.from_onnx(aliases)) < 16 << 20  # refused before reading 200 MiB
    side_by_side = [external("a", "weights.bin", offset=0), external("b", "weights.bin", offset=16)]
    g = Graph.from_onnx(save(add_model(*side_by_side), model, "ok.onnx"))
    np.testing.assert_array_equal(g.get_tensor("b").data, np.arange(4, 8, dtype=np.float32))


def test_unknown_external_data_keys_are_ignored_not_applied(folders):
    """Only location/offset/length are read: keys such as basepath or dunder names change nothing."""
    _, model = folders
    t = external("w", "weights.bin", offset=16, length=16)
    for key, value in (("basepath", "/etc"), ("__class__", "str"), ("__dict__", "x"), ("checksum", "9" * 5000)):
        t.external_data.add(key=key, value=value)
    g = Graph.from_onnx(save(add_model(t), model))
    np.testing.assert_array_equal(g.get_tensor("w").data, np.arange(4, 8, dtype=np.float32))


def test_external_data_needs_a_folder():
    refused(add_model(external("w", "weights.bin")).SerializeToString(), "'w'", "needs the model loaded from a path")


def test_strings_cannot_be_external(folders):
    _, model = folders
    t = external("s", "weights.bin")
    t.data_type = TensorProto.STRING
    refused(save(model_with([helper.make_node("Identity", ["s"], ["y"])], initializers=[t]), model),
            "'s'", "STRING", "external")


def test_traversal_is_refused_in_attribute_tensors_nested_graphs_and_functions(folders):
    """External data hides in Constant values, If bodies and function bodies too."""
    _, model = folders
    constant = model_with([helper.make_node("Constant", [], ["y"], value=external("c", "../secret.bin"))])
    refused(save(constant, model, "constant.onnx"), "'c'", "'..'")

    body = helper.make_graph([helper.make_node("Identity", ["w"], ["t"])], "then", [],
                             [vi("t", TensorProto.FLOAT, [4])], [external("w", "/etc/passwd")])
    branchy = model_with([helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body)])
    branchy.graph.input.append(vi("c", TensorProto.BOOL, []))
    refused(save(branchy, model, "if.onnx"), "'w'", "absolute")

    func = helper.make_function("f", "F", ["x"], ["z"], [
        helper.make_node("Constant", [], ["k"], value=external("k", "../secret.bin")),
        helper.make_node("Add", ["x", "k"], ["z"])], OPSET)
    with_func = model_with([helper.make_node("F", ["x"], ["y"], domain="f")], inputs=["x"], functions=[func],
                           opsets=OPSET + [helper.make_opsetid("f", 1)])
    refused(save(with_func, model, "function.onnx"), "'k'", "'..'")


def test_a_file_swapped_for_a_link_after_the_checks_is_refused(folders, monkeypatch):
    """The data is read through one descriptor opened without following links, then fstat-checked."""
    top, model = folders
    (model / "link.bin").symlink_to(top / "secret.bin")
    monkeypatch.setattr(external_data, "_safe_external_path", lambda base, location, label, tensor: base / "link.bin")
    refused(save(add_model(external("w", "weights.bin")), model), "'w'", "cannot be opened")


# -- declared sizes against carried bytes -----------------------------------------------------------
def _peak_bytes(fn) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(XGraphError):
            fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_constant_attribute_tensors_are_checked():
    wrong = TensorProto(name="c", data_type=TensorProto.FLOAT, dims=[4, 4], raw_data=b"\0" * 8)
    refused(model_with([helper.make_node("Constant", [], ["y"], value=wrong)]).SerializeToString(),
            "'c'", "declares dims [4, 4] (64 bytes) but carries 8 bytes")
    huge = TensorProto(name="h", data_type=TensorProto.FLOAT, dims=[1 << 30, 1 << 30], raw_data=b"\0" * 8)
    data = model_with([helper.make_node("Constant", [], ["y"], value=huge)]).SerializeToString()
    assert _peak_bytes(lambda: Graph.from_onnx(data)) < 8 << 20  # refused before any allocation
    refused(data, "'h'", "over the 1099511627776-byte limit")


def test_a_tensor_hidden_in_an_int_attribute_is_checked_among_thousands_of_plain_ones():
    """The walk skips attributes whose bytes it already found empty; one with the same name and type tag but a
    tensor behind it differs in its bytes, so it is still found and checked."""
    nodes = [helper.make_node("Flatten", ["x" if i == 0 else f"f{i - 1}"], [f"f{i}"], axis=1) for i in range(2000)]
    hidden = helper.make_attribute("axis", 1)
    hidden.t.CopyFrom(TensorProto(name="hid", data_type=TensorProto.FLOAT, dims=[4, 4], raw_data=b"\0" * 8))
    nodes[1500].attribute[0].CopyFrom(hidden)
    nodes.append(helper.make_node("Identity", ["f1999"], ["y"]))
    data = model_with(nodes, inputs=["x"]).SerializeToString()
    refused(data, "'hid'", "declares dims [4, 4] (64 bytes) but carries 8 bytes")


@pytest.mark.parametrize("tensor, rule", [
    (TensorProto(name="t", data_type=TensorProto.INT64, dims=[3], int64_data=[1, 2]), "carries 2 values"),
    (TensorProto(name="t", data_type=TensorProto.STRING, dims=[3], string_data=[b"a"]), "(3 strings) but carries 1"),
    (TensorProto(name="t", data_type=999, dims=[1], raw_data=b"\0"), "data type 999"),
    (TensorProto(name="t", data_type=TensorProto.UNDEFINED, dims=[1]), "data type 0"),
    (TensorProto(name="t", data_type=TensorProto.FLOAT, dims=[-4], raw_data=b""), "negative dimension -4"),
])
def test_malformed_tensors_are_refused_as_initializers_and_constants(tensor, rule):
    as_init = model_with([helper.make_node("Identity", ["t"], ["y"])], initializers=[tensor])
    refused(as_init.SerializeToString(), "'t'", rule)
    as_const = model_with([helper.make_node("Constant", [], ["y"], value=tensor)])
    refused(as_const.SerializeToString(), "'t'", rule)


def sparse(values, indices, dims, name="s"):
    return helper.make_sparse_tensor(numpy_helper.from_array(np.asarray(values, np.float32), name),
                                     numpy_helper.from_array(np.asarray(indices, np.int64), name + "_i"), dims)


@pytest.mark.parametrize("tensor, rule", [
    (sparse([1.0], [0], [1 << 30, 1 << 10]), "4398046511104 bytes, over the 1073741824-byte limit"),
    (sparse([1.0], [[1, 1]], [1 << 40, 1 << 40]), "bytes, over the 1073741824-byte limit"),
    (sparse([1.0], [-1], [4]), "index outside its 4 elements"),
    (sparse([1.0], [4], [4]), "index outside its 4 elements"),
    (sparse([1.0], [[0, 5]], [2, 2]), "index outside its shape [2, 2]"),
    (sparse([1.0, 2.0], [0], [4]), "must be INT64 of dims [2] or [2, 1]"),
    (sparse([1.0] * 5, list(range(5)), [4]), "5 values for 4 elements"),
    (sparse([1.0], [0], [-2]), "negative dimension -2"),
])
def test_sparse_tensors_are_checked_before_expanding(tensor, rule):
    init = model_with([helper.make_node("Identity", ["s"], ["y"])], sparse=[tensor]).SerializeToString()
    assert _peak_bytes(lambda: Graph.from_onnx(init)) < 8 << 20
    refused(init, "'s'", rule)
    const = model_with([helper.make_node("Constant", [], ["y"], sparse_value=tensor)]).SerializeToString()
    refused(const, rule)


def test_sparse_tensors_add_up_to_the_per_model_limit():
    parts = [sparse([1.0], [0], [1 << 27], name=f"s{i}") for i in range(3)]  # 512 MiB dense each
    m = model_with([helper.make_node("Sum", [f"s{i}" for i in range(3)], ["y"])], sparse=parts)
    assert _peak_bytes(lambda: Graph.from_onnx(m.SerializeToString())) < 8 << 20
    refused(m.SerializeToString(), "sparse tensors expand to 1610612736 bytes, over the 1073741824-byte limit")


def test_sparse_initializer_is_expanded_correctly():
    g = Graph.from_onnx(model_with([helper.make_node("Identity", ["s"], ["y"])],
                                   sparse=[sparse([1.5, 2.5], [[0, 1], [1, 0]], [2, 2])]))
    np.testing.assert_array_equal(g.get_tensor("s").data, np.array([[0, 1.5], [2.5, 0]], np.float32))


def test_tensors_in_nested_graphs_and_functions_are_checked():
    wrong = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[8], raw_data=b"\0" * 4)
    loop_body = helper.make_graph(
        [helper.make_node("Constant", [], ["k"], value=wrong), helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [vi("i", TensorProto.INT64, []), vi("cond", TensorProto.BOOL, [])],
        [vi("cond_out", TensorProto.BOOL, [])])
    then = helper.make_graph([helper.make_node("Loop", ["", "c"], [], body=loop_body),
                              helper.make_node("Neg", ["x"], ["t"])], "then", [], [vi("t", TensorProto.FLOAT, [4])])
    m = model_with([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=then)], inputs=["x"])
    m.graph.input.append(vi("c", TensorProto.BOOL, []))
    refused(m.SerializeToString(), "'w'", "declares dims [8] (32 bytes) but carries 4 bytes")

    inner_if = helper.make_graph([helper.make_node("Constant", [], ["t"], value=wrong)], "b", [],
                                 [vi("t", TensorProto.FLOAT, [8])])
    func = helper.make_function("f", "F", ["c"], ["z"], [
        helper.make_node("If", ["c"], ["z"], then_branch=inner_if, else_branch=inner_if)], OPSET)
    fm = model_with([helper.make_node("F", ["c"], ["y"], domain="f")], functions=[func],
                    opsets=OPSET + [helper.make_opsetid("f", 1)])
    refused(fm.SerializeToString(), "'w'", "carries 4 bytes")


def test_huge_declared_dimensions_skip_onnx_data_propagation(monkeypatch):
    """onnx's data propagation costs ~150 bytes per element of a 1-D tensor it meets: a 200-byte
    model declaring a [2**32] input would need hundreds of GiB, so such models are inferred without it."""
    calls = []
    real = onnx.shape_inference.infer_shapes

    def spy(model, *args, **kwargs):
        calls.append(kwargs.get("data_prop", False))
        return real(model, *args, **{**kwargs, "data_prop": False})

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", spy)
    for dim, data_prop in ((1 << 32, False), (1 << 21, False), (4, True)):
        m = model_with([helper.make_node("Add", ["x", "x"], ["y"])])
        m.graph.input.append(vi("x", TensorProto.FLOAT, [dim]))
        calls.clear()
        assert Graph.from_onnx(m).get_tensor("y").shape == (dim,)
        assert calls == [data_prop]


# -- not a model, or a model too deep -----------------------------------------------------------------
@pytest.mark.parametrize("message", [
    numpy_helper.from_array(np.ones(8, np.float32), "t"),  # wire types clash with ModelProto's
    onnx.ModelProto(producer_name="no graph"),  # parses, but has no graph or opset
    onnx.TrainingInfoProto(),  # an empty message of another type
])
def test_other_protobuf_messages_are_not_models(tmp_path, message):
    p = tmp_path / "other.onnx"
    p.write_bytes(message.SerializeToString() or b"\x00")
    refused(p, "ONNX model")


def _nested_if_bytes(levels: int) -> bytes:
    """ModelProto bytes with `levels` If bodies nested, written by hand (helper refuses to build them)."""
    def field(number: int, payload: bytes) -> bytes:
        key, length, n = bytearray(), bytearray(), len(payload)
        key.append((number << 3) | 2)
        while True:
            length.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                break
        return bytes(key) + bytes(length) + payload
    graph = b""
    for _ in range(levels):  # GraphProto.node(1) -> NodeProto.attribute(5) -> AttributeProto.g(6), type GRAPH(20)=5
        attribute = field(1, b"then_branch") + field(6, graph) + bytes([20 << 3, 5])
        graph = field(1, field(4, b"If") + field(5, attribute))
    opset = field(1, b"") + bytes([2 << 3, 17])
    return bytes([1 << 3, 8]) + field(7, graph) + field(8, opset)


def test_deeply_nested_graphs_are_refused(tmp_path):
    p = tmp_path / "deep.onnx"
    p.write_bytes(_nested_if_bytes(200))
    refused(p, "protobuf parse failed")
    model = onnx.ModelProto(ir_version=8)
    model.opset_import.add(domain="", version=17)
    graph = model.graph  # built in place: no parse, so no protobuf depth limit applies
    for _ in range(tensor_inventory.MAX_GRAPH_DEPTH + 2):
        a = graph.node.add(op_type="If").attribute.add(name="then_branch", type=onnx.AttributeProto.GRAPH)
        graph = a.g
    refused(model, "nested more than 64 levels")


# -- names and edges ------------------------------------------------------------------------------
def test_colliding_names_are_refused():
    twice = model_with([helper.make_node("Relu", ["x"], ["y"])], inputs=["x", "x"])
    refused(twice.SerializeToString(), "graph input 'x' is listed twice")
    w = numpy_helper.from_array(np.ones(4, np.float32), "w")
    dup_init = model_with([helper.make_node("Relu", ["w"], ["y"])], initializers=[w, w])
    refused(dup_init.SerializeToString(), "'w'", "defined twice")
    shadow = model_with([helper.make_node("Relu", ["x"], ["w"]), helper.make_node("Relu", ["w"], ["y"])],
                        inputs=["x"], initializers=[w])
    refused(shadow.SerializeToString(), "'w'", "defined twice")
    self_loop = model_with([helper.make_node("Add", ["x", "y"], ["y"])], inputs=["x"])
    refused(self_loop.SerializeToString(), "cycle")
    nameless = model_with([helper.make_node("Identity", [""], ["y"])], sparse=[sparse([1.0], [0], [4], name="")])
    refused(nameless.SerializeToString(), "a sparse initializer has no name")


def test_private_names_never_collide_with_model_names():
    """An omitted optional output gets a private name; a model using that very name must not clash."""
    m = model_with([helper.make_node("Dropout", ["x"], ["y", ""], name="d"),
                    helper.make_node("Relu", ["x"], ["d:unused:1"], name="r")], inputs=["x"], outputs=["y", "d:unused:1"])
    g = Graph.from_onnx(m)
    check_links(g)
    assert g.get_tensor("d:unused:1").producer.name == "r"
    assert len(g.get_op("d").get_output_tensors()) == 2


def test_nested_graph_edges_must_exist_and_must_not_make_cycles():
    ghost = helper.make_graph([helper.make_node("Neg", ["nowhere"], ["t"])], "then", [], [vi("t", TensorProto.FLOAT, [4])])
    m = model_with([helper.make_node("If", ["c"], ["y"], then_branch=ghost, else_branch=ghost, name="if")])
    m.graph.input.append(vi("c", TensorProto.BOOL, []))
    refused(m.SerializeToString(), "'if'", "nested graph that reads tensor 'nowhere'")
    late = helper.make_graph([helper.make_node("Neg", ["z"], ["t"])], "then", [], [vi("t", TensorProto.FLOAT, [4])])
    m = model_with([helper.make_node("If", ["c"], ["y"], then_branch=late, else_branch=late, name="if"),
                    helper.make_node("Relu", ["y"], ["z"], name="relu")], outputs=["z"])
    m.graph.input.append(vi("c", TensorProto.BOOL, []))
    refused(m.SerializeToString(), "cycle", "'if'")


def test_names_that_are_not_utf8_are_refused():
    m = model_with([helper.make_node("Relu", ["x"], ["y"], name="r")], inputs=["x"])
    data = m.SerializeToString().replace(b"\x1a\x01r", b"\x1a\x01\xff")  # NodeProto.name (field 3) "r" -> 0xff
    refused(data, "not valid UTF-8")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    data = m.SerializeToString().replace(b"\x12\x01N", b"\x12\x01\xfe")  # dim_param (field 2) "N" -> 0xfe
    refused(data, "not valid UTF-8")
    body = helper.make_graph([helper.make_node("Neg", ["zq"], ["t"])], "then", [], [vi("t", TensorProto.FLOAT, [4])])
    nested = model_with([helper.make_node("If", ["c"], ["y"], then_branch=body, else_branch=body, name="if")])
    nested.graph.input.append(vi("c", TensorProto.BOOL, []))
    refused(nested.SerializeToString().replace(b"zq", b"\xffq"), "'if'", "nested graph", "not valid UTF-8")
    func = helper.make_function("qqdomain", "F", ["x"], ["z"], [helper.make_node("Neg", ["x"], ["z"])], OPSET)
    with_func = model_with([helper.make_node("F", ["x"], ["y"], domain="qqdomain")], inputs=["x"], functions=[func],
                           opsets=OPSET + [helper.make_opsetid("qqdomain", 1)])
    refused(with_func.SerializeToString().replace(b"qqdomain", b"\xffqdomain"), "not valid UTF-8")


def test_names_that_are_not_utf8_are_refused_in_xmodels_and_external_data(folders, tmp_path):
    g = _graph()
    g.create_op("c", "Add", inputs=[g.get_tensor("x"), g.create_const("wqz", np.ones((1, 4), np.float32))])
    g.serialize(tmp_path / "ok.xmodel")
    bad = tmp_path / "bad.xmodel"
    bad.write_bytes((tmp_path / "ok.xmodel").read_bytes().replace(b"wqz", b"\xffqz"))
    refused(bad, "not valid UTF-8", loader=Graph.deserialize)
    _, model = folders
    data = add_model(external("w", "weights.bin")).SerializeToString().replace(b"weights.bin", b"weights.b\xffn")
    path = model / "bad-location.onnx"
    path.write_bytes(data)
    refused(path, "'w'", "not valid UTF-8")


def test_attributes_without_type_or_with_unreadable_values_are_refused():
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    node.attribute.add(name="mystery")
    refused(model_with([node], inputs=["x"]).SerializeToString(), "'r'", "without a name or type")
    node = helper.make_node("Relu", ["x"], ["y"], name="r")
    node.attribute.add(name="value", type=onnx.AttributeProto.TENSOR)
    refused(model_with([node], inputs=["x"]).SerializeToString(), "'r'", "attribute 'value' cannot be read")


# -- .xmodel metadata not as xgraph wrote it ------------------------------------------------------------
def _graph() -> Graph:
    g = Graph("g")
    x = g.create_input("x", (1, 4), np.float32)
    a = g.create_op("a", "Relu", inputs=[x])
    b = g.create_op("b", "Neg", inputs=[a.get_output_tensor()])
    for op in (a, b):
        op.get_output_tensor().dtype = np.float32
        op.get_output_tensor().shape = (1, 4)
    g.set_outputs([b.get_output_tensor()])
    root = g.get_root_subgraph()
    root.create_child_subgraph()
    for child in root.get_children():
        child.set_attr("device", "CPU")
        child.set_attr("runner", {"run": "cpu", "sim": "cpu", "ref": "cpu"})
    return g


def _edited(tmp_path: Path, edit, name: str = "bad.xmodel") -> Path:
    g = _graph()
    g.serialize(tmp_path / "ok.xmodel")
    m = onnx.load(str(tmp_path / "ok.xmodel"))
    entry = next(p for p in m.metadata_props if p.key == META_KEY)
    meta = json.loads(entry.value)
    result = edit(meta, m)
    entry.value = result if isinstance(result, str) else json.dumps(meta)
    path = tmp_path / name
    path.write_bytes(m.SerializeToString())
    return path


def _leaf(meta, i):
    return meta["tree"]["children"][i]


def _value(meta, tagged):
    """`tagged` (a [tag, value] pair) added to the file's value table: its index, for a subgraph's attrs."""
    meta["values"].append(tagged)
    return len(meta["values"]) - 1


@pytest.mark.parametrize("edit, rule", [
    (lambda meta, m: meta.update(op_order=[1, "a"]), "op order"),
    (lambda meta, m: meta.update(op_order=[{}, {}]), "op order"),
    (lambda meta, m: meta.update(op_order=["a", "a"]), "op order"),
    (lambda meta, m: meta.update(graph="g"), "'graph' is missing or not a dict"),
    (lambda meta, m: meta.update(op_annotations=[]), "'op_annotations' is missing or not a dict"),
    (lambda meta, m: meta.update(inputs=["b"]), "graph inputs do not match"),
    (lambda meta, m: meta.update(tensor_order=[["x"]]), "tensor order"),
    (lambda meta, m: meta["graph"].update(name=3), "graph name missing"),
    (lambda meta, m: meta["graph"].update(attrs=[]), "attrs of the graph are not an object"),
    (lambda meta, m: meta.update(op_annotations={"ghost": {}}), "annotations for unknown op 'ghost'"),
    (lambda meta, m: meta.update(tensor_attrs={"ghost": {}}), "attrs for unknown tensor 'ghost'"),
    (lambda meta, m: meta["graph"].update(attrs={"x": ["f", 10 ** 400]}), "is not a float"),
    (lambda meta, m: json.dumps(meta).replace(f'"version": {meta["version"]}', '"version": ' + "1" * 5000),
     "not valid JSON"),
    (lambda meta, m: meta["graph"].update(attrs={"x": ["y", "not base64!"]}), "not base64"),
    (lambda meta, m: _leaf(meta, 1).update(name=_leaf(meta, 0)["name"]), "two subgraphs under 'root' are named"),
    (lambda meta, m: _leaf(meta, 0).update(children=[]), "empty or malformed children list"),
    (lambda meta, m: _leaf(meta, 0).update(ops=[]), "has no op list"),
    (lambda meta, m: _leaf(meta, 0).update(attrs=[1]), "are not an object"),
    (lambda meta, m: meta["tree"].update(children={}), "root's children are not a list"),
    (lambda meta, m: m.metadata_props.add(key=META_KEY, value="{}"), "appears 2 times"),
    (lambda meta, m: meta.update(format="onnx"), "does not declare format"),
])
def test_metadata_not_as_xgraph_wrote_it(tmp_path, edit, rule):
    path = _edited(tmp_path, edit)
    refused(path, rule, loader=Graph.deserialize)
    refused(path, rule, loader=xgraph.load)


def test_deep_subgraph_tree_is_refused(tmp_path):
    def deepen(meta, m):
        leaf = _leaf(meta, 0)
        ops = leaf.pop("ops")
        node = leaf
        for i in range(100):
            node["children"] = [{"name": f"level{i}", "attrs": {}}]
            node = node["children"][0]
        node["ops"] = ops
    refused(_edited(tmp_path, deepen), "subgraph tree deeper than 64", loader=Graph.deserialize)


def test_wrong_runner_attr_types_fail_at_load_or_create_runner(tmp_path):
    path = _edited(tmp_path, lambda meta, m: _leaf(meta, 0)["attrs"].update(runner=_value(meta, ["s", "cpu"])))
    refused(path, "'runner'", "mode -> runner name", loader=Graph.deserialize)
    path = _edited(tmp_path, lambda meta, m: _leaf(meta, 0)["attrs"].update(
        runner=_value(meta, ["d", {"sim": ["s", "cpu"]}])))
    g = Graph.deserialize(path)  # well-typed, but without a "run" mode
    sg = g.get_subgraph(json.loads(onnx.load(str(path)).metadata_props[-1].value)["tree"]["children"][0]["name"])
    with pytest.raises(RunnerError, match="no runner for mode 'run'"):
        xgraph.Runner.create_runner(sg)
    sg.set_attr("runner", "cpu")  # in memory, create_runner still checks the type itself
    with pytest.raises(RunnerError, match="must be a dict"):
        xgraph.Runner.create_runner(sg)


def test_unregistered_runner_name_fails_clearly_and_imports_nothing(tmp_path, monkeypatch):
    """A compiled graph naming an importable module as its runner: create_runner must not import it."""
    plant = tmp_path / "planted"
    plant.mkdir()
    marker = tmp_path / "imported.txt"
    (plant / "evil_runner_module.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.syspath_prepend(str(plant))
    path = _edited(tmp_path, lambda meta, m: _leaf(meta, 0)["attrs"].update(
        runner=_value(meta, ["d", {"run": ["s", "evil_runner_module"], "sim": ["s", "evil_runner_module:Runner"]}])))
    g = Graph.deserialize(path)
    sg = next(c for c in g.get_root_subgraph().get_children() if c.get_attr("runner")["run"] == "evil_runner_module")
    for mode in ("run", "sim"):
        with pytest.raises(RunnerError) as e:
            xgraph.Runner.create_runner(sg, mode)
        assert sg.name in str(e.value) and "no runner is registered as 'evil_runner_module" in str(e.value)
    with pytest.raises(XGraphError, match="evil_runner_module"):
        xgraph.create_graph_runner(g)
    assert not marker.exists()
    assert "evil_runner_module" not in sys.modules


def test_xgraph_run_never_imports_a_module_named_by_the_file(tmp_path, monkeypatch, request):
    from xgraph.cli.main import main
    request.addfinalizer(lambda: sys.modules.pop("evil_plugin_module", None))
    plant = tmp_path / "planted"
    plant.mkdir()
    marker = tmp_path / "imported.txt"
    (plant / "evil_plugin_module.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    monkeypatch.syspath_prepend(str(plant))
    compiled = xgraph.compile(Graph.from_onnx(_graph().to_onnx()))
    compiled.set_attr("plugin_runs", [{"name": "evil_plugin_module", "device": "CPU", "runner": {"run": "cpu"}}])
    compiled.serialize(tmp_path / "hostile.xmodel")
    np.save(tmp_path / "x.npy", np.ones((1, 4), np.float32))
    try:
        main(["run", str(tmp_path / "hostile.xmodel"), "--input", f"x={tmp_path / 'x.npy'}"])
    except SystemExit:
        pass
    assert not marker.exists(), "a module named in the model file was imported"
    assert "evil_plugin_module" not in sys.modules


def test_runner_names_that_are_not_strings_fail_clearly(tmp_path):
    path = _edited(tmp_path, lambda meta, m: _leaf(meta, 0)["attrs"].update(
        runner=_value(meta, ["d", {"run": ["l", [["s", "cpu"]]]}])))
    refused(path, "'runner'", "mode 'run'", loader=Graph.deserialize)


@pytest.mark.parametrize("edit, rule", [
    (lambda meta, m: meta["graph"]["attrs"].update(compile_options=["s", "{"]), "'compile_options'"),
    (lambda meta, m: _leaf(meta, 0)["attrs"].update(runner=_value(meta, ["l", [["s", "cpu"]]])), "'runner'"),
])
def test_a_hostile_compiled_graph_is_refused_at_load(tmp_path, edit, rule):
    refused(_edited(tmp_path, edit), rule, loader=Graph.deserialize)


def test_report_of_a_damaged_graph_in_memory_fails_clearly():
    g = _graph()
    g.set_attr("compile_options", "{")
    with pytest.raises(XGraphError, match="compile_options"):
        xgraph.report(g)


# -- saving writes only the target ----------------------------------------------------------------
def _listing(folder: Path) -> dict[str, bytes | str]:
    return {str(p.relative_to(folder)): (os.readlink(p) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir")
            for p in sorted(folder.rglob("*"))}


def test_saving_never_writes_through_a_symlink(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "precious.txt").write_text("keep me")
    out = tmp_path / "out"
    out.mkdir()
    (out / "m.xmodel").symlink_to(elsewhere / "precious.txt")
    (out / "dangling.xmodel").symlink_to(elsewhere / "new.xmodel")
    before = _listing(tmp_path)
    for name in ("m.xmodel", "dangling.xmodel"):
        with pytest.raises(ModelFileError, match=rf"{name}: is a symbolic link"):
            _graph().serialize(out / name)
    assert _listing(tmp_path) == before


def test_saving_to_a_folder_or_with_a_reserved_name_changes_nothing(tmp_path):
    (tmp_path / "taken.xmodel").mkdir()
    before = _listing(tmp_path)
    with pytest.raises(ModelFileError, match="is a folder"):
        _graph().serialize(tmp_path / "taken.xmodel")
    g = _graph()
    g.create_const(ARRAY_PREFIX + "0", np.zeros(2, np.float32))
    with pytest.raises(XGraphError, match="reserve for attribute arrays"):
        g.serialize(tmp_path / "reserved.xmodel")
    with pytest.raises(ModelFileError, match="cannot write"):
        _graph().serialize(tmp_path / "nul\0name.xmodel")
    assert _listing(tmp_path) == before


def test_names_in_the_graph_never_become_paths(tmp_path):
    """Saving writes the target and nothing else, whatever the graph's names and attrs say."""
    g = Graph("../../escape")
    x = g.create_input("../x", (4,), np.float32)
    op = g.create_op("/etc/passwd", "Relu", inputs=[x])
    op.get_output_tensor().dtype = np.float32
    g.set_outputs([op.get_output_tensor()])
    g.set_attr("location", "../../outside.bin")
    out = tmp_path / "out"
    out.mkdir()
    g.serialize(out / "m.xmodel")
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["out", "out/m.xmodel"]
    h = Graph.deserialize(out / "m.xmodel")
    assert h.name == "../../escape" and h.get_op("/etc/passwd").type == "Relu"
    assert (out / "m.xmodel").stat().st_mode & 0o777 == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# -- found by the side_file fuzz target: files that loaded, then saved into files that do not ------------
def test_tensor_attribute_without_its_tensor_is_refused_at_load():
    """A SPARSE_TENSOR or TENSOR attribute with no value read as an empty tensor of no type: it loaded,
    and the .xmodel saved from it did not."""
    for kind in (onnx.AttributeProto.SPARSE_TENSOR, onnx.AttributeProto.TENSOR):
        node = helper.make_node("Identity", ["x"], ["y"], name="id")
        node.attribute.add(name="value", type=kind)
        model = model_with([node], inputs=["x"])
        refused(model.SerializeToString(), "'id'", "attribute 'value' cannot be read")


def test_tensor_attribute_referring_to_a_function_attribute_still_loads():
    body = helper.make_node("Constant", [], ["c"], name="c")
    body.attribute.add(name="value", type=onnx.AttributeProto.TENSOR, ref_attr_name="v")
    add = helper.make_node("Add", ["x", "c"], ["out"], name="add")
    fn = helper.make_function("local", "AddConst", ["x"], ["out"], [body, add], list(OPSET), attributes=["v"])
    call = helper.make_node("AddConst", ["x"], ["y"], domain="local", name="call",
                            v=numpy_helper.from_array(np.ones((1,), np.float32)))
    model = model_with([call], inputs=["x"],
                       functions=[fn], opsets=[*OPSET, helper.make_opsetid("local", 1)])
    graph = Graph.from_onnx(model.SerializeToString())  # the call is expanded, the reference resolved
    assert [op.name for op in graph.get_ops()] == ["call/c", "call/add"]
    np.testing.assert_array_equal(graph.get_op("call/c").get_attr("value"), np.ones((1,), np.float32))


@pytest.mark.parametrize("version", [1 << 32, -1])
def test_opset_version_out_of_range_is_refused(tmp_path, version):
    """Version 2**32 loaded from an .xmodel, and saving it raised a TypeError from onnx's schema lookup."""
    g = Graph.from_onnx(model_with([helper.make_node("Relu", ["x"], ["y"], name="r")],
                                   inputs=["x"]))
    g.serialize(tmp_path / "m.xmodel")
    model = onnx.load(str(tmp_path / "m.xmodel"))
    model.opset_import[0].version = version
    (tmp_path / "m.xmodel").write_bytes(model.SerializeToString())
    with pytest.raises(ModelFileError, match=f"opset import of domain '' has version {version}"):
        xgraph.load(tmp_path / "m.xmodel")
