"""Unique op names on import: the names nodes without (or with clashing) names get, and how many names are probed."""
from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import xgraph
from xgraph.ir.onnx.nodes import Nodes, unique_op_names


def slow_unique_names(given_names: list[str], op_types: list[str]) -> list[str]:
    """The naming rule, searched from "_1" for every node (the oracle: obviously right, quadratic)."""
    counts: dict[str, int] = {}
    for name in given_names:
        counts[name] = counts.get(name, 0) + 1
    taken: set[str] = set()
    names = []
    for name, op_type in zip(given_names, op_types):
        if name and counts[name] == 1:
            taken.add(name)
            names.append(name)
            continue
        base = name or op_type
        candidate, k = base, 0
        while candidate in taken or (candidate != name and candidate in counts):
            k += 1
            candidate = f"{base}_{k}"
        taken.add(candidate)
        names.append(candidate)
    return names


def chain_nodes(given_names: list[str], op_types: list[str]) -> Nodes:
    protos = [helper.make_node(t, [f"t{i - 1}" if i else "x"], [f"t{i}"], name=n)
              for i, (n, t) in enumerate(zip(given_names, op_types))]
    return Nodes(protos, "test model")


NAMES = st.sampled_from(["", "", "", "Relu", "Relu_1", "Relu_2", "Neg", "Neg_1", "a", "a_1", "b"])
TYPES = st.sampled_from(["Relu", "Neg", "Abs"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(NAMES, TYPES), max_size=40))
def test_names_follow_the_rule(rows):
    given_names, op_types = [r[0] for r in rows], [r[1] for r in rows]
    names = unique_op_names(chain_nodes(given_names, op_types), list(range(len(rows))))
    assert names == slow_unique_names(given_names, op_types)
    assert len(set(names)) == len(names)


def test_unnamed_nodes_probe_a_linear_number_of_names():
    n = 20_000
    op_types = ["Relu", "Neg", "Relu", "Abs"] * (n // 4)
    given_names = [""] * n
    given_names[5] = "Relu_7"  # a clash the search has to step over
    given_names[9] = "Neg_2"
    stats: dict[str, int] = {}
    names = unique_op_names(chain_nodes(given_names, op_types), list(range(n)), stats)
    assert names[:5] == ["Relu", "Neg", "Relu_1", "Abs", "Relu_2"]
    assert len(set(names)) == n
    # the two given names sit in the first 2,000 nodes, so those are named as in a 2,000-node model
    assert names[:2_000] == slow_unique_names(given_names[:2_000], op_types[:2_000])
    # searching from "_1" for every node probes about n**2 / 8 names here (50 million); the search
    # that resumes where it ended probes each base's suffixes once: fewer than two names per node
    assert stats["probes"] < 2 * n + 10


def test_unnamed_model_imports_with_op_type_names():
    nodes = [helper.make_node("Relu" if i % 2 else "Neg", [f"t{i - 1}" if i else "x"], [f"t{i}"]) for i in range(6)]
    g = helper.make_graph(nodes, "unnamed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("t5", TensorProto.FLOAT, [2])])
    graph = xgraph.Graph.from_onnx(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]))
    assert [op.name for op in graph.get_ops()] == ["Neg", "Relu", "Neg_1", "Relu_1", "Neg_2", "Relu_2"]
