"""Verdicts and kernel choices memoised per op signature: asked once per kind of op, never shared wrongly."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import xgraph
from xgraph.compiler.checks import ACCEPT, refuse, static_shapes
from xgraph.compiler.options import parse_options
from xgraph.compiler.pipeline import choose_kernel
from xgraph.compiler.placement import place, propose_placement
from xgraph.compiler.verdicts import SMALL_ARRAY_BYTES, Signatures, VerdictMemo, op_signature
from xgraph.devices import get_devices


def model(nodes, inputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "m", inputs, [helper.make_tensor_value_info(nodes[-1].output[0],
                                                                             TensorProto.UNDEFINED, None)],
                          initializer=list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def graph_of(nodes, inputs, inits=()):
    g = xgraph.Graph.from_onnx(model(nodes, inputs, inits))
    g.get_root_subgraph().create_child_subgraph()
    return g


def relu_chain(n, shape=(1, 8)):
    nodes = [helper.make_node("Relu", [f"t{i - 1}" if i else "x"], [f"t{i}"], name=f"n{i}") for i in range(n)]
    return graph_of(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))])


class Counting:
    """A check that counts its calls and accepts everything."""

    def __init__(self):
        self.calls = 0

    def __call__(self, op):
        self.calls += 1
        return ACCEPT


def test_one_check_per_signature_and_device():
    g = relu_chain(300)
    aicore, aicpu = Counting(), Counting()
    memo = VerdictMemo({"AICORE": aicore, "AICPU": aicpu}, Signatures(g))
    ops = g.get_ops()
    assert all(memo.verdict("AICORE", op).ok for op in ops)
    # the last Relu's output is the graph output: used, like all the others, so one signature
    assert aicore.calls == 1 and aicpu.calls == 0
    assert memo.verdict("AICPU", ops[7]).ok and aicpu.calls == 1
    assert memo.stats == {"checks": 2}


def test_signature_tells_apart_what_checks_read():
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8])]
    big = np.zeros(SMALL_ARRAY_BYTES // 4 + 1, np.float32)
    inits = [numpy_helper.from_array(np.array([2], np.int64), "k2"),
             numpy_helper.from_array(np.array([2], np.int64), "k2b"),
             numpy_helper.from_array(np.array([3], np.int64), "k3"),
             numpy_helper.from_array(big, "big1"), numpy_helper.from_array(big.copy(), "big2")]
    nodes = [
        helper.make_node("LeakyRelu", ["x"], ["a"], name="alpha_float", alpha=1.0),
        helper.make_node("LeakyRelu", ["a"], ["b"], name="alpha_float_again", alpha=1.0),
        helper.make_node("LeakyRelu", ["b"], ["c"], name="alpha_half", alpha=0.5),
        helper.make_node("TopK", ["c", "k2"], ["d", "d_i"], name="k2", axis=-1),
        helper.make_node("TopK", ["c", "k2b"], ["e", "e_i"], name="k2_other_weight_same_values", axis=-1),
        helper.make_node("TopK", ["c", "k3"], ["f", "f_i"], name="k3", axis=-1),
        helper.make_node("Add", ["d", "e"], ["g"], name="add_de"),
        helper.make_node("Concat", ["f", "g"], ["h"], name="concat", axis=-1),
        helper.make_node("Add", ["big1", "big1"], ["s1"], name="big_same"),
        helper.make_node("Add", ["big1", "big1"], ["s2"], name="big_same_again"),
        helper.make_node("Add", ["big2", "big2"], ["s3"], name="big_equal_values"),
        helper.make_node("Concat", ["s1", "s2", "s3"], ["s"], name="big_concat", axis=0),
        helper.make_node("Shape", ["s"], ["s_shape"], name="shape_s"),
        helper.make_node("Cast", ["s_shape"], ["s_float"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Concat", ["h", "s_float"], ["out"], name="out", axis=-1),
    ]
    g = xgraph.Graph.from_onnx(model(nodes, x, inits))
    sig = {op.name: op_signature(op) for op in g.get_ops()}
    assert sig["alpha_float"] == sig["alpha_float_again"] != sig["alpha_half"]
    assert sig["k2"] == sig["k2_other_weight_same_values"] != sig["k3"]  # small weights: by value
    assert sig["big_same"] == sig["big_same_again"] != sig["big_equal_values"]  # large ones: by tensor
    ints = Signatures(g)
    assert (ints(g.get_op("k2")) == ints(g.get_op("k2_other_weight_same_values"))) and \
        ints(g.get_op("k2")) != ints(g.get_op("k3"))
    assert same_partition(Signatures(g).ids(g.get_ops()), [sig[op.name] for op in g.get_ops()])


def same_partition(a: list, b: list) -> bool:
    """True when a[i] == a[j] exactly where b[i] == b[j]."""
    return len(a) == len(b) and len(set(a)) == len(set(b)) == len(set(zip(a, b)))


def test_bulk_signing_equals_one_op_at_a_time():
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 3])]
    nodes = [helper.make_node("Transpose", ["x"], ["a"], name="perm_ints", perm=[0, 2, 1]),
             helper.make_node("Transpose", ["a"], ["b"], name="perm_back", perm=[0, 2, 1]),
             helper.make_node("Transpose", ["b"], ["c"], name="perm_other", perm=[1, 0, 2]),
             helper.make_node("Relu", ["c"], ["d"], name="relu"),
             helper.make_node("Relu", ["d"], ["e"], name="relu_again"),
             helper.make_node("LeakyRelu", ["e"], ["f"], name="leaky", alpha=0.5),
             helper.make_node("Transpose", ["f"], ["out"], name="to_output", perm=[0, 2, 1])]
    g = xgraph.Graph.from_onnx(model(nodes, x))
    ops = g.get_ops()
    one_by_one = Signatures(g)
    expected = [one_by_one(op) for op in ops]
    half = Signatures(g)
    first = [half(op) for op in ops[:3]]  # some signed singly, the rest in bulk: one numbering
    assert half.ids(ops) == first + half.ids(ops[3:])
    assert same_partition(half.ids(ops), expected)
    assert same_partition(Signatures(g).ids(ops), [op_signature(op) for op in ops])
    bulk = Signatures(g).ids(ops)
    assert bulk[0] == bulk[1] != bulk[2]  # equal perms share, another perm does not
    assert bulk[5] not in bulk[:5] and bulk[6] not in bulk[:6]  # another type; an output read by nothing


def test_list_attributes_of_ints_and_floats_do_not_share():
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])]
    nodes = [helper.make_node("Transpose", ["x"], ["a"], name="t", perm=[1, 0]),
             helper.make_node("Transpose", ["a"], ["b"], name="u", perm=[1, 0])]
    g = xgraph.Graph.from_onnx(model(nodes, x))
    op = g.get_op("t")
    keys, ids = [], []
    for value in ([1, 0], [1.0, 0.0], [1, 0.0], (1, 0), [True, 0], ["1", "0"]):
        op.set_attr("perm", value)
        keys.append(op_signature(op))
        ids.append(Signatures(g).ids([g.get_op("u"), op])[1])
    assert len(set(keys)) == len(keys)
    assert ids[0] == 0 and all(i == 1 for i in ids[1:])  # only [1, 0] signs like u's perm


def test_bool_and_int_attributes_do_not_share():
    x = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])]
    nodes = [helper.make_node("ReduceMax", ["x"], ["a"], name="int_flag", keepdims=1, axes=[1]),
             helper.make_node("Relu", ["x"], ["b"], name="relu")]
    g = xgraph.Graph.from_onnx(model(nodes, x, opset=13))
    op = g.get_op("int_flag")
    before = op_signature(op)
    op.set_attr("keepdims", True)
    assert op_signature(op) != before


def test_a_verdict_quoting_a_tensor_name_is_not_shared():
    g = relu_chain(5, shape=("batch", 8))
    check = static_shapes()
    memo = VerdictMemo({"AICORE": check}, Signatures(g))
    reasons = [memo.verdict("AICORE", op).reason for op in g.toposort()]
    assert reasons[0] == "Relu with dynamic shape (batch, 8) on 'x' unsupported: needs static shapes; fix them " \
                         "with the input_shape option"
    assert [r.split("'")[1] for r in reasons] == ["x", "t0", "t1", "t2", "t3"]
    assert memo.stats["checks"] == 5
    assert all(memo.is_specific(op) for op in g.get_ops())


def test_refuse_keeps_the_names_through_labels():
    v = refuse("Relu on 't0' unsupported", ("t0",))
    assert v.names == ("t0",) and v == refuse("Relu on 't0' unsupported")  # names do not take part in ==


# ------------------------------------------------------------------ memoised == unmemoised


# ------------------------------------------------------------------ memoised == unmemoised

class Unshared(Signatures):
    """Every op its own signature: the placement without any sharing (the oracle)."""

    def __call__(self, op):
        return id(op)

    def ids(self, ops):
        return [id(op) for op in ops]


OPS = st.sampled_from(["Relu", "Abs", "TopK", "Softmax", "Transpose", "LeakyRelu", "CastInt", "CastFloat", "Shape",
                       "Add"])


def random_model(kinds: list[str], dynamic: bool):
    """A chain of the given kinds (each valid on what the chain carries at that point)."""
    inits = [numpy_helper.from_array(np.array([2], np.int64), "k")]
    nodes, prev, dtype, rank = [], "x", "float", 2
    for i, kind in enumerate(kinds):
        name = f"t{i}"
        if kind == "CastInt":
            nodes.append(helper.make_node("Cast", [prev], [name], to=TensorProto.INT64))
            dtype = "int"
        elif kind == "CastFloat":
            nodes.append(helper.make_node("Cast", [prev], [name], to=TensorProto.FLOAT))
            dtype = "float"
        elif kind == "Shape":
            nodes.append(helper.make_node("Shape", [prev], [name]))
            dtype, rank = "int", 1
        elif kind == "TopK" and rank == 2:
            nodes.append(helper.make_node("TopK", [prev, "k"], [name, name + "_i"], axis=0))
        elif kind in ("Softmax", "LeakyRelu") and dtype == "float":
            attrs = {"axis": -1} if kind == "Softmax" else {"alpha": 0.25 if i % 2 else 0.5}
            nodes.append(helper.make_node(kind, [prev], [name], **attrs))
        elif kind == "Transpose" and rank == 2:
            nodes.append(helper.make_node("Transpose", [prev], [name], perm=[1, 0]))
        elif kind == "Add":
            nodes.append(helper.make_node("Add", [prev, prev], [name]))
        else:
            nodes.append(helper.make_node("Abs" if kind == "Abs" else "Neg", [prev], [name]))
        prev = name
    shape = ["batch", 4] if dynamic else [4, 4]
    return model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)], inits)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, min_size=1, max_size=30), st.booleans(),
       st.sampled_from([{}, {"devices": "aicore,cpu"}, {"min_subgraph_ops": 3}, {"fallback": "error",
                                                                                  "devices": "aicpu"}]))
def test_memoised_placement_equals_placement_without_sharing(kinds, dynamic, options):
    m = random_model(kinds, dynamic)
    devices = get_devices()
    results = []
    for signatures in (Signatures, Unshared):
        g = xgraph.Graph.from_onnx(m)
        g.get_root_subgraph().create_child_subgraph()
        try:
            proposal = propose_placement(g, devices, parse_options(options, devices), signatures=signatures(g))
            results.append({op.name: placed for op, placed in proposal.items()})
        except xgraph.XGraphError as e:
            results.append(str(e))
    assert results[0] == results[1]


def test_compiled_kernels_are_what_choose_kernel_says(models):
    g = xgraph.compile(models.cnn_with_lstm())
    for child in g.get_root_subgraph().get_children():
        for op in child.get_ops():
            assert op.get_attr("kernel") == choose_kernel(op, child.get_attr("device"))


def test_kernel_annotation_with_the_placed_subgraphs_equals_without(models):
    from xgraph.compiler.pipeline import annotate_kernels
    devices = get_devices()
    kernels = []
    for hint in (True, False):
        g = xgraph.Graph.from_onnx(models.cnn_with_lstm())
        g.get_root_subgraph().create_child_subgraph()
        placed = place(g, devices, parse_options({}, devices))
        annotate_kernels(g, devices, placed=placed if hint else None)
        kernels.append({op.name: op.get_attr("kernel") for op in g.get_ops()})
    assert kernels[0] == kernels[1]
    assert kernels[0] == {op.name: choose_kernel(op, op.get_attr("device")) for op in g.get_ops()}
