"""The bulk encodings the import and export paths use give what protobuf's own calls give."""
from __future__ import annotations

import onnx
import pytest
from onnx import TensorProto, helper

from xgraph.ir.onnx.wire import nodes, type_field, value_infos, varint


@pytest.mark.parametrize("n", [0, 1, 127, 128, 300, 16383, 16384, 2**31 + 5])
def test_varint_is_protobufs(n):
    # TensorProto.dims (field 1, repeated int64, not packed in proto2): key 0x08, then the value as a varint
    assert onnx.TensorProto(dims=[n]).SerializeToString() == b"\x08" + varint(n)


def _types() -> list[onnx.TypeProto]:
    seq = onnx.TypeProto()
    seq.sequence_type.elem_type.CopyFrom(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
    return [helper.make_tensor_type_proto(TensorProto.FLOAT, [1, "n", 64]),
            helper.make_tensor_type_proto(TensorProto.INT64, None),
            helper.make_tensor_type_proto(TensorProto.FLOAT, list(range(1, 70))),  # a type over 127 bytes
            seq, onnx.TypeProto()]


def test_value_infos_equal_the_adds():
    names = ["x", "", "é名", "t" * 300, "a:unused:0"]
    entries = [(name, tp) for name in names for tp in _types()]
    expected = onnx.GraphProto(name="g")
    for name, tp in entries:
        expected.value_info.add(name=name, type=tp)
    merged = onnx.GraphProto(name="g")
    merged.MergeFromString(value_infos((name, type_field(tp.SerializeToString())) for name, tp in entries))
    assert merged == expected
    assert merged.SerializeToString() == expected.SerializeToString()
    assert value_infos([]) == b""


def _model_with(nodes, **graph) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], **graph)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_exported_value_info_is_fill_value_infos_in_any_batch(monkeypatch):
    """The export's value_info (merged in batches) is one `value_info(t)` per typed op output, in op order,
    tensors of sequence type included, wherever the batches break."""
    import xgraph.ir.onnx.exporter as exporter
    from xgraph import Graph

    nodes = [helper.make_node("Relu", ["x"], ["r0"])]
    nodes += [helper.make_node("Relu", [f"r{i}"], [f"r{i + 1}"]) for i in range(6)]
    nodes += [helper.make_node("SequenceConstruct", ["r3", "r6"], ["s"]),
              helper.make_node("SequenceAt", ["s", "zero"], ["a"]),
              helper.make_node("Add", ["a", "r6"], ["y"])]
    model = _model_with(nodes, initializer=[helper.make_tensor("zero", TensorProto.INT64, [], [0])])
    graph = Graph.from_onnx(model)
    boundary = {t.name for t in graph.get_input_tensors() + graph.get_output_tensors()}
    expected = [exporter.value_info(t) for op in graph.get_ops() for t in op.get_output_tensors()
                if t.name not in boundary]
    assert any(vi.type.HasField("sequence_type") for vi in expected)
    exported = []
    for batch in (1, 2, 3, 4096):
        monkeypatch.setattr(exporter, "_BATCH", batch)
        exported.append(graph.to_onnx().SerializeToString())
        assert list(onnx.load_from_string(exported[-1]).graph.value_info) == expected
    assert len(set(exported)) == 1


def test_nodes_equal_the_adds():
    long = "t" * 300
    rows = [([], [], "", "", ""), (["x", ""], ["y"], "n", "Add", ""), (["é名"], ["a", "", "b"], "名", "TopK", "ai.onnx"),
            ([long] * 3, [long + "o"], long, "Custom" * 30, "com.example" * 20), (["x"], ["z"], "m", "Add", "")]
    expected = onnx.GraphProto(name="g")
    for inputs, outputs, name, op_type, domain in rows:
        expected.node.add(op_type=op_type, domain=domain, name=name, input=inputs, output=outputs)
    merged = onnx.GraphProto(name="g")
    merged.MergeFromString(nodes(rows))
    assert merged == expected
    assert merged.SerializeToString() == expected.SerializeToString()
    assert all(n.HasField("domain") and n.HasField("name") for n in merged.node)  # present even when empty
    assert nodes([]) == b""
    with pytest.raises(UnicodeEncodeError):
        nodes([([], [], "\ud800", "Relu", "")])


def test_exported_nodes_are_the_per_op_adds_in_any_batch(monkeypatch):
    """The export's nodes (merged in batches, attributes and doc strings set after) are one `_add_node` per op,
    in order, wherever the batches break: omitted inputs, omitted outputs, attributes, doc strings, domains."""
    import xgraph.ir.onnx.exporter as exporter
    from xgraph import Graph

    nodes_ = [helper.make_node("Relu", ["x"], ["r0"], doc_string="first")]
    nodes_ += [helper.make_node("LeakyRelu", [f"r{i}"], [f"r{i + 1}"], alpha=0.1 * i) for i in range(5)]
    nodes_ += [helper.make_node("Clip", ["r5", "", "hi"], ["c"]),
               helper.make_node("Dropout", ["c"], ["d", ""]),
               helper.make_node("TopK", ["d", "k"], ["v", "i"], axis=0, doc_string="last"),
               helper.make_node("Add", ["v", "r5"], ["y"])]
    model = _model_with(nodes_, initializer=[helper.make_tensor("hi", TensorProto.FLOAT, [], [6.0]),
                                             helper.make_tensor("k", TensorProto.INT64, [1], [2])])
    graph = Graph.from_onnx(model)
    graph.get_op(graph.get_ops()[2].name).set_attr("device", "AICORE", onnx_type=None)  # an annotation: left out
    out_set = set(graph.get_output_tensors())
    expected = onnx.GraphProto()
    for op in graph.get_ops():
        exporter._add_node(expected.node, op, out_set)
    exported = []
    for batch in (1, 2, 3, 4096):
        monkeypatch.setattr(exporter, "_BATCH", batch)
        exported.append(graph.to_onnx().SerializeToString())
        assert list(onnx.load_from_string(exported[-1]).graph.node) == list(expected.node)
    assert len(set(exported)) == 1
    assert [n.doc_string for n in expected.node if n.doc_string] == ["first", "last"]
    assert sum(len(n.attribute) for n in expected.node) == 6 and "" in expected.node[7].output
